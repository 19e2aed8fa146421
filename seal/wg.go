package seal

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"strings"

	"golang.org/x/crypto/curve25519"
)

// WGKeyFile is where a host keeps its WireGuard private key, in its
// directory (D/host): standard base64 of 32 bytes and a newline, mode
// 0600, as wg genkey writes it.
const WGKeyFile = "wg.key"

// wgKeySize is the size of either half of a WireGuard key.
const wgKeySize = 32

// WGKey is a WireGuard key pair (Curve25519, the private half clamped as
// wg genkey clamps it), held in memory until it is written.
type WGKey struct {
	priv [wgKeySize]byte
	pub  []byte
}

// GenerateWGKey makes a WireGuard key pair.
func GenerateWGKey() (*WGKey, error) {
	k := &WGKey{}
	if _, err := rand.Read(k.priv[:]); err != nil {
		return nil, fmt.Errorf("make a wireguard key: %w", err)
	}
	k.priv[0] &= 248
	k.priv[31] = (k.priv[31] & 127) | 64
	pub, err := curve25519.X25519(k.priv[:], curve25519.Basepoint)
	if err != nil {
		return nil, fmt.Errorf("make a wireguard key: %w", err)
	}
	k.pub = pub
	return k, nil
}

// Public is the public half in standard base64, as wg pubkey prints it.
func (k *WGKey) Public() string { return base64.StdEncoding.EncodeToString(k.pub) }

// WriteFile writes the private half to path, mode 0600, synced. A file
// already there is refused: a key is written once, at join or genesis,
// and a rejoin makes its own in a fresh directory.
func (k *WGKey) WriteFile(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("write wireguard key: %w", err)
	}
	_, err = f.WriteString(base64.StdEncoding.EncodeToString(k.priv[:]) + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("write wireguard key %s: %w", path, err)
	}
	return nil
}

// MakeWGKey makes a WireGuard key pair, writes its private half to path
// (WriteFile) and returns its public half.
func MakeWGKey(path string) (string, error) {
	k, err := GenerateWGKey()
	if err != nil {
		return "", err
	}
	if err := k.WriteFile(path); err != nil {
		return "", err
	}
	return k.Public(), nil
}

// LoadWGKey reads a WireGuard private key from path, as MakeWGKey or wg
// genkey writes it, and returns its private and public halves in standard
// base64. A file readable by anyone but its owner, or not a key, is
// refused.
func LoadWGKey(path string) (private, public string, err error) {
	info, err := os.Stat(path)
	if err != nil {
		return "", "", fmt.Errorf("read wireguard key: %w", err)
	}
	if !info.Mode().IsRegular() {
		return "", "", fmt.Errorf("read wireguard key %s: not a regular file", path)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		return "", "", fmt.Errorf("read wireguard key %s: mode %04o lets others than its owner read it; want 0600 (chmod 600 %s)", path, perm, path)
	}
	if info.Size() > 128 {
		return "", "", fmt.Errorf("read wireguard key %s: %d bytes, too long for a key", path, info.Size())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", "", fmt.Errorf("read wireguard key %s: %w", path, err)
	}
	private = strings.TrimSpace(string(b))
	raw, err := base64.StdEncoding.DecodeString(private)
	if err != nil || len(raw) != wgKeySize {
		return "", "", fmt.Errorf("read wireguard key %s: not 32 bytes in standard base64", path)
	}
	pub, err := curve25519.X25519(raw, curve25519.Basepoint)
	if err != nil {
		return "", "", fmt.Errorf("read wireguard key %s: %w", path, err)
	}
	return private, base64.StdEncoding.EncodeToString(pub), nil
}
