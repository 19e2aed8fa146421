package spec

import "time"

// KindOverlay is the kind of a host's overlay report (OverlayState), on
// NodeSubject(node, KindOverlay).
const KindOverlay = "overlay"

// API requests and results of the overlay's verbs.
type (
	// OverlayEnableRequest turns the overlay on with range CIDR.
	OverlayEnableRequest struct {
		CIDR string `json:"cidr"`
	}
	// OverlayEnableResult says the range in force, how many nodes were
	// given an address, and the roster message sent (nil: none; then
	// NamesKept says why every host keeps the names it has).
	OverlayEnableResult struct {
		CIDR      string      `json:"cidr"`
		Given     int         `json:"given"`
		Roster    *PushRoster `json:"roster,omitempty"`
		NamesKept string      `json:"names_kept,omitempty"`
	}

	OverlayDisableRequest struct{}
	// OverlayDisableResult says whether the overlay was on, and the
	// roster message sent (as OverlayEnableResult).
	OverlayDisableResult struct {
		Was       bool        `json:"was"`
		Roster    *PushRoster `json:"roster,omitempty"`
		NamesKept string      `json:"names_kept,omitempty"`
	}

	// OverlayShowRequest asks for the overlay's members after node After,
	// by name, as many as fit one reply.
	OverlayShowRequest struct {
		After string `json:"after,omitempty"`
	}
	// OverlayShowResult is the overlay: its range (empty: off) and its
	// members; Next names where the next page starts (empty: the last).
	OverlayShowResult struct {
		Time    time.Time     `json:"time"`
		CIDR    string        `json:"cidr,omitempty"`
		Enabled *time.Time    `json:"enabled,omitempty"`
		Members []NodeOverlay `json:"members"`
		Next    string        `json:"next,omitempty"`
	}

	// NodeOverlay is one node on the overlay: its key and address as the
	// roster carries them, and what its host last reported (Reported:
	// when; nil: never) of its mode, endpoints, relay and peers' paths.
	// Stale names the peers whose path has had no handshake for
	// OverlayStale, a failure in mesh status.
	NodeOverlay struct {
		Node      string        `json:"node"`
		IP        string        `json:"overlay_ip"`
		Key       string        `json:"wg_key"`
		Endpoints []string      `json:"endpoints,omitempty"`
		Relay     bool          `json:"relay,omitempty"`
		Mode      string        `json:"mode,omitempty"`
		Error     string        `json:"error,omitempty"`
		Reported  *time.Time    `json:"reported,omitempty"`
		Peers     []OverlayPath `json:"peers,omitempty"`
		Stale     []string      `json:"stale,omitempty"`
	}
)
