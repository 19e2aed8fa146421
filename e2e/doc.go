// Package e2e holds the end-to-end tests: the mesh binary, built once by
// TestMain, run as real processes (genesis, controller, host --join) and
// driven through its CLI, as a user would. It has no code of its own; the
// rig the tests share (starting a mesh, joining a host, pushing, reading
// status) is in rig_test.go.
package e2e
