package client

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// HistoryStatus summarises task history's day partitions of one final status
// (GET /history). Days are UTC dates (YYYY-MM-DD), empty without partitions;
// RowsEstimate is the database planner's estimate, never a count.
type HistoryStatus struct {
	Status       string `json:"status"`
	Partitions   int    `json:"partitions"`
	OldestDay    string `json:"oldest_day"`
	NewestDay    string `json:"newest_day"`
	RowsEstimate int64  `json:"rows_estimate"`
}

// RetentionSweep is what the answering replica's last retention sweep did.
type RetentionSweep struct {
	At                time.Time `json:"at"`
	TookMs            int64     `json:"took_ms"`
	PartitionsDropped int       `json:"partitions_dropped"`
	RowsDropped       int64     `json:"rows_dropped"`
	BatchDeleted      int64     `json:"batch_deleted"`
	Held              int       `json:"held"`
	Error             *string   `json:"error"`
}

// History is task history's day partitions by status and the last retention sweep
// (nil before the replica's first).
type History struct {
	Statuses  []HistoryStatus `json:"statuses"`
	LastSweep *RetentionSweep `json:"last_sweep"`
}

// History returns task history's day partitions and the answering replica's last
// retention sweep (admin).
func (c *Client) History(ctx context.Context) (*History, error) {
	var out History
	if _, _, err := c.do(ctx, http.MethodGet, "/history", nil, nil, &out); err != nil {
		return nil, fmt.Errorf("get history: %w", err)
	}
	return &out, nil
}
