package host_test

import (
	"context"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/spec"
)

// applyOwnIDs is TestApplyOwner's part that needs no root: any user may
// chown a file it owns to itself, so the ids, the names and the order of
// chown and chmod are held by every run.
func applyOwnIDs(t *testing.T) {
	uid, gid := os.Getuid(), os.Getgid()
	me, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		t.Fatalf("look up this test's user: %v", err)
	}
	myGroup, err := user.LookupGroupId(strconv.Itoa(gid))
	if err != nil {
		t.Fatalf("look up this test's group: %v", err)
	}
	root := t.TempDir()
	e := host.NewEngine(host.Services{Root: root})
	file := fileDecl("/opt/tool", 0o4755, "#!/bin/sh\n")
	fileOf(file).Owner, fileOf(file).Group = strconv.Itoa(uid), strconv.Itoa(gid)
	dir := dirDecl("/opt/data", 0o2750)
	dirOf(dir).Owner, dirOf(dir).Group = strconv.Itoa(uid), strconv.Itoa(gid)
	resources := []spec.Resource{file, dir}
	filePath, dirPath := filepath.Join(root, "opt/tool"), filepath.Join(root, "opt/data")

	results, record, _ := e.Apply(context.Background(), resources, nil)
	checkOutcomes(t, results, allOutcome(resources, spec.Created))
	checkOwner(t, filePath, uint32(uid), uint32(gid))
	checkOwner(t, dirPath, uint32(uid), uint32(gid))
	// A chown by a user clears setuid and setgid: the chmod comes after.
	checkMode(t, filePath, syscall.S_IFREG, 0o4755)
	checkMode(t, dirPath, syscall.S_IFDIR, 0o2750)

	results, record, writes := e.Apply(context.Background(), resources, record)
	checkOutcomes(t, results, allOutcome(resources, spec.Unchanged))
	if writes != 0 {
		t.Errorf("a second apply made %d writes", writes)
	}

	// The same ids by name are the same declaration to hold.
	fileOf(file).Owner, fileOf(file).Group = me.Username, myGroup.Name
	dirOf(dir).Owner, dirOf(dir).Group = me.Username, myGroup.Name
	resources = []spec.Resource{file, dir}
	results, _, writes = e.Apply(context.Background(), resources, record)
	checkOutcomes(t, results, allOutcome(resources, spec.Unchanged))
	if writes != 0 {
		t.Errorf("owners by name made %d writes", writes)
	}
}
