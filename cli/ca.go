package cli

import (
	"fmt"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/urfave/cli/v2"
)

func caCommand() *cli.Command {
	return &cli.Command{
		Name:  "ca",
		Usage: "the mesh's certificate authority",
		Subcommands: []*cli.Command{{
			Name:  "roots",
			Usage: "print the mesh's root certificate (PEM) and its pin",
			Description: `The root every certificate of the mesh chains to, as /roots.pem serves it;
the pin (sha256 of the certificate) is what join tokens carry. The PEM goes
to standard output, the pin to standard error, so the output can be piped.

Example:
   mesh ca roots > mesh-root.pem && openssl x509 -noout -subject -in mesh-root.pem`,
			Flags: []cli.Flag{dirFlag(), jsonFlag()},
			Action: func(c *cli.Context) error {
				if err := wantArgs(c, 0, "no arguments"); err != nil {
					return err
				}
				res, err := callCmd(c, spec.CARoots, spec.CARootsRequest{})
				if err != nil {
					return err
				}
				if c.Bool("json") {
					return printJSON(c.App.Writer, res)
				}
				fmt.Fprint(c.App.Writer, res.PEM)
				for _, p := range res.Pins {
					say(c.App.ErrWriter, "pin %s\n", p)
				}
				return nil
			},
		}, {
			Name:  "domain",
			Usage: "the public domains the mesh's CA may sign names under",
			Subcommands: []*cli.Command{{
				Name:      "add",
				Usage:     "declare a public domain: a new intermediate, under the same root, signs names under it",
				ArgsUsage: "DOMAIN",
				Description: `The CA's intermediate is constrained to names under .internal, mesh-bus
(the bus's certificate) and the declared domains: a certificate for any other
name does not verify. A domain covers itself and every name below it. The
constraints are fixed when an intermediate is issued, so adding a domain
issues a new intermediate under the same root; certificates the old one
signed verify until they expire. Refused, changing nothing: a name that is
not a DNS domain, .internal or a name under it, a domain already declared.

Example:
   mesh ca domain add example.org && mesh ca domain list`,
				Flags: []cli.Flag{dirFlag()},
				Action: func(c *cli.Context) error {
					if err := wantArgs(c, 1, "one argument, the domain"); err != nil {
						return err
					}
					domain := c.Args().First()
					if err := spec.CheckCADomain(domain); err != nil {
						return usageError{err.Error()}
					}
					res, err := callCmd(c, spec.CADomainAdd, spec.CADomainAddRequest{Domain: domain})
					if err != nil {
						return err
					}
					printDomainAdded(c.App.Writer, domain, res)
					return nil
				},
			}, {
				Name:  "list",
				Usage: "list the declared domains and what the current intermediate may sign",
				Description: `Each domain declared, when, and whether the current intermediate's
constraints name it (an add that failed half-way leaves one that does not:
adding it again finishes it); then the intermediate's serial and every
domain it may sign names under, the mesh's own included.

Example:
   mesh ca domain list --json`,
				Flags: []cli.Flag{dirFlag(), jsonFlag()},
				Action: func(c *cli.Context) error {
					if err := wantArgs(c, 0, "no arguments"); err != nil {
						return err
					}
					res, err := callCmd(c, spec.CADomainList, spec.CADomainListRequest{})
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSON(c.App.Writer, res)
					}
					return printDomains(c.App.Writer, res)
				},
			}},
		}, {
			Name:  "certs",
			Usage: "list every certificate the controller signed for a node",
			Description: `Every leaf signed for a node's request, in the order they were: the node,
the names, when it expires, and its serial. mesh status fails a node whose
latest certificate for a name it serves expires within a week.

Example:
   mesh ca certs --json`,
			Flags: []cli.Flag{dirFlag(), jsonFlag()},
			Action: func(c *cli.Context) error {
				if err := wantArgs(c, 0, "no arguments"); err != nil {
					return err
				}
				certs, err := listCerts(c)
				if err != nil {
					return err
				}
				if c.Bool("json") {
					return printJSON(c.App.Writer, certs)
				}
				return printCerts(c.App.Writer, certs)
			},
		}},
	}
}

// listCerts asks for every leaf issued, page by page.
func listCerts(c *cli.Context) ([]spec.IssuedCert, error) {
	op, err := dialOperator(c)
	if err != nil {
		return nil, err
	}
	defer op.Close()
	certs := []spec.IssuedCert{}
	req := spec.CACertsRequest{}
	for {
		res, err := call(op, spec.CACerts, req)
		if err != nil {
			return nil, err
		}
		certs = append(certs, res.Certs...)
		if res.Next <= req.After {
			return certs, nil
		}
		req.After = res.Next
	}
}
