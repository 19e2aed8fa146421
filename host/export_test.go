package host

// Died is died, for the tests outside the package: what the host's event
// follower records when the engine says a container died.
func (d *Docker) Died(name string) { d.died(name) }
