package mesh

import (
	"hash/fnv"
	"slices"
	"sync"
)

// nodeStripes is how many locks the nodes' sequences are taken under.
const nodeStripes = 256

// nodeLocks are the locks nodes' sequences are taken under: a fixed array
// of stripes, a node's being the one its name hashes to, so a removed
// node leaves no lock behind. Nodes share stripes: whoever holds one node's
// lock takes no other, and lockAll takes distinct stripes in stripe order.
type nodeLocks struct {
	stripes [nodeStripes]sync.Mutex
}

// stripe is the index of node's lock.
func stripe(node string) int {
	h := fnv.New32a()
	h.Write([]byte(node))
	return int(h.Sum32() % nodeStripes)
}

// of is the lock node's sequence is taken under.
func (l *nodeLocks) of(node string) *sync.Mutex { return &l.stripes[stripe(node)] }

// lockAll takes the locks of nodes, each stripe once and in stripe order,
// and returns what releases them.
func (l *nodeLocks) lockAll(nodes []string) (unlock func()) {
	var idx []int
	for _, n := range nodes {
		idx = append(idx, stripe(n))
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	for _, i := range idx {
		l.stripes[i].Lock()
	}
	return func() {
		for _, i := range slices.Backward(idx) {
			l.stripes[i].Unlock()
		}
	}
}
