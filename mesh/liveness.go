package mesh

import "time"

// silentUnknown is how long a node whose heartbeats do not say how often
// they come (spec.Heartbeat.IntervalMS) may go unheard before status calls
// it silent: three of the default 10 s heartbeats.
const silentUnknown = 30 * time.Second

// deliveryAllowance is added to two heartbeat intervals before a node is
// silent: the time a heartbeat may take from the host's ticker to the
// controller's clock (the ticker firing late on a busy machine, the bus, the
// controller's queue of heartbeats). One second keeps the promise that a
// host beating every second is silent within 3 s of its death.
const deliveryAllowance = time.Second

// SilentAfter is how long a node that sends a heartbeat every interval may
// go unheard before it is silent: two missed heartbeats and the delivery
// allowance. An interval of zero (not said) is the fixed 30 s window.
func SilentAfter(interval time.Duration) time.Duration {
	if interval <= 0 {
		return silentUnknown
	}
	return 2*interval + deliveryAllowance
}

// Silent says whether a node last heard at lastHeard, beating every
// interval (zero: not said), is silent at now.
func Silent(lastHeard, now time.Time, interval time.Duration) bool {
	return now.Sub(lastHeard) > SilentAfter(interval)
}
