// Package overlay is the overlay's interface on a host: one WireGuard
// interface (spec.OverlayInterface), run by the kernel where it has
// WireGuard and by the embedded userspace implementation otherwise, its
// peers changed in place, and the choice of each peer's path (direct, or
// through a relay) from the roster's members and the handshakes seen.
package overlay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/mesh-fleet/mesh/spec"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// MTU is the interface's MTU: room for WireGuard's headers over a 1500-byte
// path, IPv4 or IPv6.
const MTU = 1420

// SocketDir is where a userspace interface's UAPI socket lies, NAME.sock,
// where wg(8) looks for it.
const SocketDir = "/var/run/wireguard"

// Config is what the interface is made with.
type Config struct {
	// Name is the interface's name; "" means spec.OverlayInterface.
	Name string
	// SocketDir is where the userspace interface's UAPI socket is made;
	// "" means SocketDir.
	SocketDir string
	// PrivateKey is the node's WireGuard private key, standard base64.
	PrivateKey string
	// ListenPort is the UDP port WireGuard listens on; zero means
	// spec.OverlayPort.
	ListenPort int
	// Address is the node's overlay address with the overlay range's
	// prefix length: the address the interface carries and, by its bits,
	// the route to the range.
	Address netip.Prefix
}

// Device is the overlay's interface on this machine. Its methods are safe
// to call from any goroutine.
type Device struct {
	cfg Config
	key wgtypes.Key
	log *slog.Logger

	mu   sync.Mutex
	mode string // "": not up
	// userspace: the embedded WireGuard and its UAPI listener.
	dev  *device.Device
	uapi net.Listener
	// kernel: the netlink client.
	wg *wgctrl.Client
	// peers are the peers last set, by public key.
	peers map[wgtypes.Key]Peer
	// forward is the FORWARD rule added for a relay (nil: none).
	forward []string
}

// New checks cfg and starts nothing.
func New(cfg Config, log *slog.Logger) (*Device, error) {
	if cfg.Name == "" {
		cfg.Name = spec.OverlayInterface
	}
	if cfg.SocketDir == "" {
		cfg.SocketDir = SocketDir
	}
	if cfg.ListenPort == 0 {
		cfg.ListenPort = spec.OverlayPort
	}
	if cfg.ListenPort < 0 || cfg.ListenPort > 65535 {
		return nil, fmt.Errorf("overlay listen port %d is not a UDP port", cfg.ListenPort)
	}
	key, err := wgtypes.ParseKey(cfg.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("overlay private key: %w", err)
	}
	if !cfg.Address.IsValid() || !cfg.Address.Addr().Is4() {
		return nil, fmt.Errorf("overlay address %s is not an IPv4 address with a prefix length", cfg.Address)
	}
	return &Device{cfg: cfg, key: key, log: log, peers: map[wgtypes.Key]Peer{}}, nil
}

// Name is the interface's name.
func (d *Device) Name() string { return d.cfg.Name }

// PublicKey is the public half of the device's key, standard base64.
func (d *Device) PublicKey() string { return d.key.PublicKey().String() }

// Mode is spec.OverlayKernel or spec.OverlayUserspace once Up, "" before.
func (d *Device) Mode() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mode
}

// Up makes the interface: the kernel's WireGuard when `ip link add NAME
// type wireguard` works, the embedded userspace one otherwise; gives it
// the key, the listen port and the address, and sets it up. An interface
// of that name left from an earlier run is replaced. Up on a device up is
// nothing.
func (d *Device) Up(ctx context.Context) (err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mode != "" {
		return nil
	}
	d.removeLink(ctx)
	defer func() {
		if err != nil {
			d.downLocked()
		}
	}()
	if ip(ctx, "link", "add", d.cfg.Name, "type", "wireguard") == nil {
		if err := d.upKernel(); err != nil {
			return err
		}
	} else if err := d.upUserspace(); err != nil {
		return err
	}
	if err := ip(ctx, "addr", "replace", d.cfg.Address.String(), "dev", d.cfg.Name); err != nil {
		return err
	}
	if err := ip(ctx, "link", "set", d.cfg.Name, "up"); err != nil {
		return err
	}
	d.peers = map[wgtypes.Key]Peer{}
	d.log.Info("overlay interface up", "interface", d.cfg.Name, "mode", d.mode, "address", d.cfg.Address, "port", d.cfg.ListenPort)
	return nil
}

// upKernel configures the kernel's interface, made already, with wgctrl.
func (d *Device) upKernel() error {
	d.mode = spec.OverlayKernel
	c, err := wgctrl.New()
	if err != nil {
		return fmt.Errorf("open the kernel's wireguard control: %w", err)
	}
	d.wg = c
	port := d.cfg.ListenPort
	if err := c.ConfigureDevice(d.cfg.Name, wgtypes.Config{PrivateKey: &d.key, ListenPort: &port, ReplacePeers: true}); err != nil {
		return fmt.Errorf("configure %s: %w", d.cfg.Name, err)
	}
	return nil
}

// upUserspace runs the embedded WireGuard on a TUN device, with its UAPI
// socket where wg(8) finds it.
func (d *Device) upUserspace() error {
	d.mode = spec.OverlayUserspace
	t, err := tun.CreateTUN(d.cfg.Name, MTU)
	if err != nil {
		return fmt.Errorf("create the tun device %s: %w", d.cfg.Name, err)
	}
	prefix := "overlay " + d.cfg.Name + ": "
	logger := &device.Logger{
		Verbosef: func(format string, args ...any) { d.log.Debug(prefix + fmt.Sprintf(format, args...)) },
		Errorf:   func(format string, args ...any) { d.log.Warn(prefix + fmt.Sprintf(format, args...)) },
	}
	d.dev = device.NewDevice(t, conn.NewDefaultBind(), logger)
	conf := fmt.Sprintf("private_key=%s\nlisten_port=%d\nreplace_peers=true\n", hexKey(d.key), d.cfg.ListenPort)
	if err := d.dev.IpcSet(conf); err != nil {
		return fmt.Errorf("configure %s: %w", d.cfg.Name, err)
	}
	if err := d.dev.Up(); err != nil {
		return fmt.Errorf("start %s: %w", d.cfg.Name, err)
	}
	l, err := d.listenUAPI()
	if err != nil {
		return err
	}
	d.uapi = l
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go d.dev.IpcHandle(c)
		}
	}()
	return nil
}

// listenUAPI listens on the interface's UAPI socket, replacing one left
// by a process that is gone.
func (d *Device) listenUAPI() (net.Listener, error) {
	if err := os.MkdirAll(d.cfg.SocketDir, 0o755); err != nil {
		return nil, fmt.Errorf("create the wireguard socket directory: %w", err)
	}
	path := d.socketPath()
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove the stale wireguard socket: %w", err)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on the wireguard socket: %w", err)
	}
	os.Chmod(path, 0o600)
	return l, nil
}

func (d *Device) socketPath() string {
	return filepath.Join(d.cfg.SocketDir, d.cfg.Name+".sock")
}

// Down removes the interface (its address and route go with it), the
// UAPI socket and the relay's forwarding rule. Down on a device not up
// removes what an earlier run may have left.
func (d *Device) Down() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.downLocked()
}

func (d *Device) downLocked() error {
	var errs []error
	if d.forward != nil {
		errs = append(errs, iptables(context.Background(), "-D", d.forward))
		d.forward = nil
	}
	if d.uapi != nil {
		d.uapi.Close()
		d.uapi = nil
	}
	if d.dev != nil {
		d.dev.Close()
		d.dev = nil
	}
	if d.wg != nil {
		d.wg.Close()
		d.wg = nil
	}
	os.Remove(d.socketPath())
	d.removeLink(context.Background())
	if d.mode != "" {
		d.log.Info("overlay interface down", "interface", d.cfg.Name)
	}
	d.mode = ""
	d.peers = map[wgtypes.Key]Peer{}
	return errors.Join(errs...)
}

// removeLink deletes the interface when it is there.
func (d *Device) removeLink(ctx context.Context) {
	if _, err := net.InterfaceByName(d.cfg.Name); err == nil {
		ip(ctx, "link", "del", d.cfg.Name)
	}
}

// Forward turns forwarding between the interface and itself on or off, for
// a relay: packets that come in on it for another overlay address go out
// on it again. On: the interface's own forwarding sysctl (not the
// machine's) and an iptables FORWARD rule accepting the overlay range from
// the interface to the interface; off removes the rule.
func (d *Device) Forward(on bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mode == "" {
		return fmt.Errorf("forward on %s: the interface is not up", d.cfg.Name)
	}
	ctx := context.Background()
	if !on {
		if d.forward == nil {
			return nil
		}
		err := iptables(ctx, "-D", d.forward)
		d.forward = nil
		return err
	}
	if err := os.WriteFile(filepath.Join("/proc/sys/net/ipv4/conf", d.cfg.Name, "forwarding"), []byte("1\n"), 0o644); err != nil {
		return fmt.Errorf("turn forwarding on for %s: %w", d.cfg.Name, err)
	}
	if d.forward != nil {
		return nil
	}
	cidr := d.cfg.Address.Masked().String()
	rule := []string{"FORWARD", "-i", d.cfg.Name, "-o", d.cfg.Name, "-s", cidr, "-d", cidr, "-j", "ACCEPT"}
	if iptables(ctx, "-C", rule) != nil {
		if err := iptables(ctx, "-I", rule); err != nil {
			return err
		}
	}
	d.forward = rule
	return nil
}

// ip runs ip(8) with args.
func ip(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// iptables runs iptables(8) with op (-C, -I, -D) on rule, waiting for the
// lock.
func iptables(ctx context.Context, op string, rule []string) error {
	args := append([]string{"-w", op}, rule...)
	out, err := exec.CommandContext(ctx, "iptables", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
