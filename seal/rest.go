package seal

import (
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/crypto/chacha20poly1305"
)

// RestKeySize is the length of the at-rest key file, in bytes.
const RestKeySize = 32

// TextPrefix starts the text form of a sealed value, with the version of
// the form: base64url (no padding) of nonce, ciphertext and tag follows.
const TextPrefix = "sealed:v1:"

// Subkeys are derived from the key file's bytes with HKDF-SHA256, one for
// each use, so a digest never shares a key with the cipher.
const (
	infoCipher = "mesh seal rest v1 cipher"
	infoDigest = "mesh seal rest v1 digest"
)

// ErrNotSealed is text that does not start with TextPrefix.
var ErrNotSealed = errors.New("not a sealed value")

// RestKey is the controller's at-rest key: it seals the values it keeps
// secret in its store, and digests them.
type RestKey struct {
	aead   cipher.AEAD
	digest []byte
}

// NewRestKey makes a RestKey of RestKeySize raw bytes.
func NewRestKey(raw []byte) (*RestKey, error) {
	if len(raw) != RestKeySize {
		return nil, fmt.Errorf("at-rest key: %d bytes, want %d", len(raw), RestKeySize)
	}
	ck, err := hkdf.Key(sha256.New, raw, nil, infoCipher, chacha20poly1305.KeySize)
	if err != nil {
		return nil, fmt.Errorf("at-rest key: derive the cipher's key: %w", err)
	}
	dk, err := hkdf.Key(sha256.New, raw, nil, infoDigest, sha256.Size)
	if err != nil {
		return nil, fmt.Errorf("at-rest key: derive the digest's key: %w", err)
	}
	aead, err := chacha20poly1305.NewX(ck)
	if err != nil {
		return nil, fmt.Errorf("at-rest key: %w", err)
	}
	return &RestKey{aead: aead, digest: dk}, nil
}

// CreateRestKey writes a new random key to path, readable by its owner
// only, and returns it. A file already at path is left alone and refused:
// replacing a key loses every value sealed under it.
func CreateRestKey(path string) (*RestKey, error) {
	raw := make([]byte, RestKeySize)
	rand.Read(raw)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create at-rest key: %w", err)
	}
	if _, err := f.Write(raw); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("create at-rest key %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("create at-rest key %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("create at-rest key %s: %w", path, err)
	}
	return NewRestKey(raw)
}

// LoadRestKey reads the key at path. A file that is not a regular file,
// that others may read or write, or that is not RestKeySize bytes is
// refused, saying what to do; a missing file wraps os.ErrNotExist.
func LoadRestKey(path string) (*RestKey, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read at-rest key: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read at-rest key: %w", err)
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("read at-rest key %s: not a regular file: put the controller's seal.key back from its backup", path)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("read at-rest key %s: mode %04o lets others read it: chmod 600 %s, and treat the secrets it sealed as seen", path, perm, path)
	}
	if info.Size() != RestKeySize {
		return nil, fmt.Errorf("read at-rest key %s: %d bytes, want %d: put the controller's seal.key back from its backup; without it the sealed values do not open", path, info.Size(), RestKeySize)
	}
	raw := make([]byte, RestKeySize)
	if _, err := io.ReadFull(f, raw); err != nil {
		return nil, fmt.Errorf("read at-rest key %s: %w", path, err)
	}
	return NewRestKey(raw)
}

// Place is the associated data binding a sealed value to where it is
// kept: its parts joined by NUL, e.g. Place("assignment", module, node,
// setting). Parts hold no NUL (they are names), so two places never join
// to the same text.
func Place(parts ...string) string { return strings.Join(parts, "\x00") }

// Seal seals value for place: a random 24-byte nonce, then the ciphertext
// and its tag.
func (k *RestKey) Seal(value []byte, place string) []byte {
	nonce := make([]byte, chacha20poly1305.NonceSizeX, chacha20poly1305.NonceSizeX+len(value)+chacha20poly1305.Overhead)
	rand.Read(nonce) // never fails: crypto/rand ends the program instead
	return k.aead.Seal(nonce, nonce, value, []byte(place))
}

// Open opens what Seal sealed for the same place; anything else (another
// key, another place, a byte changed) is an error.
func (k *RestKey) Open(sealed []byte, place string) ([]byte, error) {
	if len(sealed) < chacha20poly1305.NonceSizeX+chacha20poly1305.Overhead {
		return nil, errors.New("open sealed value: too short")
	}
	nonce, body := sealed[:chacha20poly1305.NonceSizeX], sealed[chacha20poly1305.NonceSizeX:]
	value, err := k.aead.Open(nil, nonce, body, []byte(place))
	if err != nil {
		return nil, errors.New("open sealed value: it was not sealed for this place under this key")
	}
	return value, nil
}

// SealText is Seal in text form: TextPrefix, then base64url.
func (k *RestKey) SealText(value, place string) string {
	return TextPrefix + base64.RawURLEncoding.EncodeToString(k.Seal([]byte(value), place))
}

// OpenText opens what SealText sealed for the same place. Text without
// TextPrefix wraps ErrNotSealed.
func (k *RestKey) OpenText(text, place string) (string, error) {
	body, err := DecodeText(text)
	if err != nil {
		return "", err
	}
	value, err := k.Open(body, place)
	if err != nil {
		return "", err
	}
	return string(value), nil
}

// IsSealedText reports whether text is in the sealed text form.
func IsSealedText(text string) bool { return strings.HasPrefix(text, TextPrefix) }

// DecodeText is the sealed bytes text holds, unopened.
func DecodeText(text string) ([]byte, error) {
	rest, ok := strings.CutPrefix(text, TextPrefix)
	if !ok {
		return nil, ErrNotSealed
	}
	body, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return nil, fmt.Errorf("open sealed value: %w", err)
	}
	return body, nil
}

// Digest is a keyed digest of value (HMAC-SHA256 under a key of its own,
// derived from the at-rest key), in hex: equal values have equal digests
// under one key, and a digest says nothing of its value to whoever lacks
// the key.
func (k *RestKey) Digest(value []byte) string {
	m := hmac.New(sha256.New, k.digest)
	m.Write(value)
	return hex.EncodeToString(m.Sum(nil))
}
