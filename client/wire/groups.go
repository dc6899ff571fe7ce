package wire

// The groups of a fair queue: PUT /queues/:name/groups/:group takes GroupSettings,
// and the group routes answer with Group (a listing with GroupPage).

// GroupSettings are a group's overrides of its queue's group defaults; nil keeps
// the queue's default (weight: 1). It is the body of PUT /queues/:name/groups/:group.
type GroupSettings struct {
	Weight         *int     `json:"weight"` // turns per round, 1..1000
	MaxConcurrency *int     `json:"max_concurrency"`
	RateLimit      *float64 `json:"rate_limit"`
	RateBurst      *int     `json:"rate_burst"`
}

// GroupLimits are the settings in force for a group: its overrides, else its
// queue's group defaults; nil = unlimited.
type GroupLimits struct {
	Weight         int      `json:"weight"`
	MaxConcurrency *int     `json:"max_concurrency"`
	RateLimit      *float64 `json:"rate_limit"`
	RateBurst      *int     `json:"rate_burst"`
}

// GroupCounts are a group's tasks by status (exact, kept as tasks move).
type GroupCounts struct {
	Pending   int64 `json:"pending"`
	Blocked   int64 `json:"blocked"`
	Claimed   int64 `json:"claimed"` // buffered: dispatched, not yet taken by a worker
	Executing int64 `json:"executing"`
	Retry     int64 `json:"retry"`
	Dead      int64 `json:"dead"`
}

// Group is the API's group object: its name, overrides, the settings in force,
// and its counts.
type Group struct {
	Group string `json:"group"`
	GroupSettings
	Effective GroupLimits `json:"effective"`
	GroupCounts
}

// GroupPage is the answer to GET /queues/:name/groups; NextCursor is null on the
// last page.
type GroupPage struct {
	Groups     []Group `json:"groups"`
	NextCursor *string `json:"next_cursor"`
}
