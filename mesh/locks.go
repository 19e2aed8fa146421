package mesh

import "sync"

// nodeLock is the lock a node's sequence is taken under.
func (c *Controller) nodeLock(node string) *sync.Mutex {
	c.locksMu.Lock()
	defer c.locksMu.Unlock()
	if c.locks == nil {
		c.locks = map[string]*sync.Mutex{}
	}
	l, ok := c.locks[node]
	if !ok {
		l = &sync.Mutex{}
		c.locks[node] = l
	}
	return l
}
