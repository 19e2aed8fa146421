package launch

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"github.com/mesh-fleet/mesh/resolver"
	"github.com/mesh-fleet/mesh/spec"
)

// The addresses a child's resolver attached (the bridge gateways') pass
// from one child to the next: each child is given one end of a unix socket
// pair (spec.HandOverDNSEnv), on which its resolver sends each attached
// address's sockets as it ends; once the child exited the launcher reads
// them, and hands them to the next child (spec.AttachedDNSEnv). A query
// sent meanwhile waits in the socket for the next child to answer. The
// launcher closes its copies once that child started: held longer, they
// would keep an address bound that the child detaches and attaches again.

// attachedDNS is an attached address as a child handed it over: the
// address as bound, the prefix it allowed, and its sockets.
type attachedDNS struct {
	addr, allow string
	udp, tcp    *os.File
}

func closeAttached(as []attachedDNS) {
	for _, a := range as {
		a.udp.Close()
		a.tcp.Close()
	}
}

// handOver is one child's part in the hand-over: the launcher's end of its
// socket pair (-1: none), the child's end, and the addresses it was given.
type handOver struct {
	mine   int
	theirs *os.File
	given  []attachedDNS
}

// handDNS gives cmd, whose ExtraFiles start at readyFD, the attached
// addresses the child before handed over and an end of a new socket pair
// to hand its own over on. Without a socket pair the child hands nothing
// over, and the next one attaches its addresses anew.
func (l *Launcher) handDNS(cmd *exec.Cmd) *handOver {
	h := &handOver{mine: -1, given: l.attached}
	l.attached = nil
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		l.log.Warn("the resolver's attached addresses are not held across the next swap", "err", fmt.Errorf("make a socket pair: %w", err))
	} else {
		h.mine, h.theirs = fds[0], os.NewFile(uintptr(fds[1]), "dns-handover")
		cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%d", spec.HandOverDNSEnv, readyFD+len(cmd.ExtraFiles)))
		cmd.ExtraFiles = append(cmd.ExtraFiles, h.theirs)
	}
	var entries []string
	for _, a := range h.given {
		n := readyFD + len(cmd.ExtraFiles)
		entries = append(entries, fmt.Sprintf("%s,%s,%d,%d", a.addr, a.allow, n, n+1))
		cmd.ExtraFiles = append(cmd.ExtraFiles, a.udp, a.tcp)
	}
	if len(entries) > 0 {
		cmd.Env = append(cmd.Env, spec.AttachedDNSEnv+"="+strings.Join(entries, " "))
	}
	return h
}

// started closes the launcher's copies of what the child was given once
// it started; a child that did not start leaves the addresses given to
// the next.
func (h *handOver) started(l *Launcher, ok bool) {
	if h.theirs != nil {
		h.theirs.Close()
	}
	if ok {
		closeAttached(h.given)
		return
	}
	l.attached = h.given
	if h.mine >= 0 {
		syscall.Close(h.mine)
	}
}

// exited reads what the child handed over, for the next child.
func (h *handOver) exited(l *Launcher) {
	if h.mine < 0 {
		return
	}
	l.attached = receiveAttached(h.mine)
	syscall.Close(h.mine)
	if len(l.attached) > 0 {
		l.log.Debug("the child handed its attached resolver addresses over", "count", len(l.attached))
	}
}

// receiveAttached reads the messages a child sent on its end of the pair,
// without waiting: the child has exited. A message that is not an address,
// a prefix and two descriptors is dropped.
func receiveAttached(fd int) []attachedDNS {
	var out []attachedDNS
	buf := make([]byte, 512)
	oob := make([]byte, syscall.CmsgSpace(2*4))
	for {
		n, oobn, _, _, err := syscall.Recvmsg(fd, buf, oob, syscall.MSG_DONTWAIT|syscall.MSG_CMSG_CLOEXEC)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || n == 0 && oobn == 0 {
			return out
		}
		var fds []int
		if cmsgs, err := syscall.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, c := range cmsgs {
				if rights, err := syscall.ParseUnixRights(&c); err == nil {
					fds = append(fds, rights...)
				}
			}
		}
		f := strings.Fields(string(buf[:n]))
		if len(fds) != 2 || len(f) != 2 || !validAttached(f[0], f[1]) {
			for _, fd := range fds {
				syscall.Close(fd)
			}
			continue
		}
		out = append(out, attachedDNS{addr: f[0], allow: f[1],
			udp: os.NewFile(uintptr(fds[0]), "dns-attached-udp"), tcp: os.NewFile(uintptr(fds[1]), "dns-attached-tcp")})
	}
}

// validAttached says whether addr is host:port and allow a prefix.
func validAttached(addr, allow string) bool {
	_, err := netip.ParseAddrPort(addr)
	_, perr := netip.ParsePrefix(allow)
	return err == nil && perr == nil
}

// ChildDNS is, for a launcher's child, the resolver's sockets it serves:
// held (its resolver address's, handed or not) and the addresses the child
// before attached (spec.AttachedDNSEnv); and the Config.HandOver that
// sends the addresses this child's resolver attached to the launcher
// (spec.HandOverDNSEnv), nil when the process is no launcher's child. An
// address that cannot be read is left out: the host attaches it again.
func ChildDNS(held []resolver.Held) ([]resolver.Held, func([]resolver.Held)) {
	for _, e := range strings.Fields(os.Getenv(spec.AttachedDNSEnv)) {
		if h, ok := attachedFromEnv(e); ok {
			held = append(held, h)
		}
	}
	fd, err := strconv.Atoi(os.Getenv(spec.HandOverDNSEnv))
	if err != nil || fd < 3 {
		return held, nil
	}
	syscall.CloseOnExec(fd)
	return held, func(hs []resolver.Held) {
		for _, h := range hs {
			sendAttached(fd, h) // one not sent is attached anew by the next
		}
	}
}

// attachedFromEnv reads one entry of spec.AttachedDNSEnv,
// "host:port,prefix,UDPFD,TCPFD", and takes its descriptors.
func attachedFromEnv(e string) (resolver.Held, bool) {
	p := strings.Split(e, ",")
	if len(p) != 4 {
		return resolver.Held{}, false
	}
	u, uerr := strconv.Atoi(p[2])
	t, terr := strconv.Atoi(p[3])
	if uerr != nil || terr != nil || u < 3 || t < 3 || u == t {
		return resolver.Held{}, false
	}
	syscall.CloseOnExec(u)
	syscall.CloseOnExec(t)
	uf, tf := os.NewFile(uintptr(u), "dns-attached-udp"), os.NewFile(uintptr(t), "dns-attached-tcp")
	defer uf.Close()
	defer tf.Close()
	allow, err := netip.ParsePrefix(p[1])
	if err != nil {
		return resolver.Held{}, false
	}
	pc, err := net.FilePacketConn(uf)
	if err != nil {
		return resolver.Held{}, false
	}
	ln, err := net.FileListener(tf)
	if err != nil {
		pc.Close()
		return resolver.Held{}, false
	}
	return resolver.Held{Addr: p[0], Allow: allow, UDP: pc, TCP: ln}, true
}

// sendAttached sends h's sockets to the launcher, without waiting: their
// descriptors are passed as they are, never through os.File.Fd, which
// would make the socket blocking for the resolver still reading it.
func sendAttached(fd int, h resolver.Held) error {
	uc, uok := h.UDP.(syscall.Conn)
	tc, tok := h.TCP.(syscall.Conn)
	if !uok || !tok {
		return fmt.Errorf("hand over %s: not a socket", h.Addr)
	}
	ur, err := uc.SyscallConn()
	if err != nil {
		return fmt.Errorf("hand over %s: %w", h.Addr, err)
	}
	tr, err := tc.SyscallConn()
	if err != nil {
		return fmt.Errorf("hand over %s: %w", h.Addr, err)
	}
	msg := []byte(h.Addr + " " + h.Allow.String())
	var sent error
	err = ur.Control(func(u uintptr) {
		err := tr.Control(func(t uintptr) {
			sent = syscall.Sendmsg(fd, msg, syscall.UnixRights(int(u), int(t)), nil, syscall.MSG_DONTWAIT)
		})
		if sent == nil {
			sent = err
		}
	})
	if sent == nil {
		sent = err
	}
	if sent != nil {
		return fmt.Errorf("hand over %s: %w", h.Addr, sent)
	}
	return nil
}
