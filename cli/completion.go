package cli

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"
)

// completionCommand prints a shell's completion script for mesh. Each
// script asks mesh itself for the words that may come next (mesh ...
// --generate-bash-completion, urfave/cli's), so it follows the commands
// and flags of the binary installed.
func completionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print the completion script of a shell: bash, zsh or fish",
		ArgsUsage: "bash|zsh|fish",
		Description: `Load it in the shell's start-up file.

Example:
   source <(mesh completion bash)               # in ~/.bashrc
   source <(mesh completion zsh)                # in ~/.zshrc, after compinit
   mesh completion fish > ~/.config/fish/completions/mesh.fish`,
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 1, "a shell: bash, zsh or fish"); err != nil {
				return err
			}
			return printCompletion(c.App, c.Args().First())
		},
	}
}

// printCompletion writes shell's completion script for app.
func printCompletion(app *cli.App, shell string) error {
	switch shell {
	case "bash":
		_, err := io.WriteString(app.Writer, bashCompletion)
		return err
	case "zsh":
		_, err := io.WriteString(app.Writer, zshCompletion)
		return err
	case "fish":
		script, err := app.ToFishCompletion()
		if err != nil {
			return fmt.Errorf("write the fish completion: %w", err)
		}
		_, err = io.WriteString(app.Writer, script)
		return err
	}
	return usagef("mesh completion %q: the shells are bash, zsh and fish", shell)
}

// bashCompletion is urfave/cli's bash script (autocomplete/bash_autocomplete)
// for the program mesh, made to need nothing of the bash-completion
// package: the words before the cursor are asked what may follow them.
const bashCompletion = `# bash completion for mesh: source <(mesh completion bash)
_mesh_bash_autocomplete() {
  local cur opts
  local -a words
  COMPREPLY=()
  cur="${COMP_WORDS[COMP_CWORD]}"
  words=("${COMP_WORDS[@]:0:COMP_CWORD}")
  if [[ "$cur" == "-"* ]]; then
    opts=$("${words[@]}" "$cur" --generate-bash-completion 2>/dev/null)
  else
    opts=$("${words[@]}" --generate-bash-completion 2>/dev/null)
  fi
  COMPREPLY=($(compgen -W "${opts}" -- "${cur}"))
  return 0
}

complete -o bashdefault -o default -F _mesh_bash_autocomplete mesh
`

// zshCompletion is urfave/cli's zsh script (autocomplete/zsh_autocomplete)
// for the program mesh.
const zshCompletion = `#compdef mesh
# zsh completion for mesh: source <(mesh completion zsh), after compinit

_mesh_zsh_autocomplete() {
  local -a opts
  local cur
  cur=${words[-1]}
  if [[ "$cur" == "-"* ]]; then
    opts=("${(@f)$(${words[@]:0:#words[@]-1} ${cur} --generate-bash-completion)}")
  else
    opts=("${(@f)$(${words[@]:0:#words[@]-1} --generate-bash-completion)}")
  fi

  if [[ "${opts[1]}" != "" ]]; then
    _describe 'values' opts
  else
    _files
  fi
}

compdef _mesh_zsh_autocomplete mesh
`
