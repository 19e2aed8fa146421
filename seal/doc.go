// Package seal keeps secret values sealed: at rest under the controller's
// key, in transit to one node's key.
//
// At rest (RestKey), a value is sealed with XChaCha20-Poly1305 under a key
// kept in its own file beside the store, never inside it, and bound to its
// place (Place) so that a sealed value copied to another row does not
// open. Its text form (SealText) starts with TextPrefix, so a sealed value
// is known by sight. The package imports only the standard library and
// golang.org/x/crypto.
package seal
