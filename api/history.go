package api

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
)

// HistoryStatus summarises the day partitions of one final status in task history.
type HistoryStatus struct {
	Status     string `json:"status"`
	Partitions int    `json:"partitions"`
	// OldestDay and NewestDay are UTC days (YYYY-MM-DD); empty without partitions.
	OldestDay string `json:"oldest_day"`
	NewestDay string `json:"newest_day"`
	// RowsEstimate is the planner's estimate of the tasks they hold (never counted).
	RowsEstimate int64 `json:"rows_estimate"`
}

// Sweep is a retention sweep as GET /history shows it.
type Sweep struct {
	At                time.Time `json:"at"`
	TookMs            int64     `json:"took_ms"`
	PartitionsDropped int       `json:"partitions_dropped"`
	RowsDropped       int64     `json:"rows_dropped"`
	BatchDeleted      int64     `json:"batch_deleted"`
	Held              int       `json:"held"`
	Error             *string   `json:"error"`
}

// history answers GET /history: task history's day partitions by status, read from
// the catalog, and this replica's last retention sweep.
func (s *Server) history(c *gin.Context) {
	days, err := s.store.ListHistoryDays(c.Request.Context())
	if err != nil {
		s.fail(c, err)
		return
	}
	out := []HistoryStatus{{Status: "done"}, {Status: "cancelled"}, {Status: "dead"}}
	for _, d := range days {
		for i := range out {
			h := &out[i]
			if h.Status != d.Status {
				continue
			}
			day := d.Day.Format(time.DateOnly)
			if h.Partitions == 0 || day < h.OldestDay {
				h.OldestDay = day
			}
			if day > h.NewestDay {
				h.NewestDay = day
			}
			h.Partitions++
			h.RowsEstimate += d.Rows
		}
	}
	var last *Sweep
	if s.cfg.LastSweep != nil {
		if sw, ok := s.cfg.LastSweep(); ok {
			last = &sw
		}
	}
	c.JSON(http.StatusOK, gin.H{"statuses": out, "last_sweep": last})
}
