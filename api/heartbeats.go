package api

import (
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/taskforge/taskforge/client/wire"
	"github.com/taskforge/taskforge/storage"
)

// maxHeartbeatBatch bounds the leases of one batch heartbeat: a worker with more
// tasks in hand sends several.
const maxHeartbeatBatch = 1000

// heartbeatBatchBodyLimit fits maxHeartbeatBatch items with room to spare.
const heartbeatBatchBodyLimit = 256 << 10

// heartbeatBatch extends every lease a worker holds in one request and one
// statement: what a worker with many tasks in hand sends once per interval instead
// of one heartbeat per task. Each lease is extended or refused (lease_lost) on its
// own; the answer lists them in the order sent.
func (s *Server) heartbeatBatch(c *gin.Context) {
	var req wire.HeartbeatBatchRequest
	if err := decode(c, heartbeatBatchBodyLimit, &req); err != nil {
		s.fail(c, err)
		return
	}
	if err := validWorkerID(req.WorkerID); err != nil {
		s.fail(c, err)
		return
	}
	if len(req.Leases) == 0 || len(req.Leases) > maxHeartbeatBatch {
		s.fail(c, invalid("leases must hold 1 to %d items", maxHeartbeatBatch))
		return
	}
	refs := make([]storage.LeaseRef, len(req.Leases))
	for i, l := range req.Leases {
		id, token, err := parseLease(fmt.Sprintf("leases[%d]", i), l.TaskID, l.LeaseToken)
		if err != nil {
			s.fail(c, err)
			return
		}
		refs[i] = storage.LeaseRef{TaskID: id, LeaseToken: token}
	}
	held, err := s.lc.HeartbeatMany(c.Request.Context(), req.WorkerID, refs, s.cfg.LeaseTimeout)
	if err != nil {
		s.fail(c, err)
		return
	}
	s.recordWorker(c.Request.Context(), req.WorkerID, nil)
	lost := toAPIError(storage.ErrLeaseLost)
	out := make([]wire.LeaseResult, len(refs))
	for i, r := range refs {
		out[i].TaskID = r.TaskID.String()
		l, ok := held[r.TaskID]
		if !ok {
			out[i].Error = &errorDetail{Code: lost.Code, Message: lost.Message}
			continue
		}
		out[i].LeaseExpiresAt, out[i].CancelRequested = &l.ExpiresAt, &l.CancelRequested
	}
	c.JSON(http.StatusOK, wire.HeartbeatBatchResponse{Leases: out})
}
