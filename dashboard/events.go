package dashboard

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// events streams the live feed (GET /admin/events) as server-sent events:
//
//	event: history   the chart's recent points, once, first
//	event: snapshot  a Snapshot, about every second
//	event: problem   {"message"} when a snapshot could not be computed
//
// The stream ends when the browser goes away or the hub stops.
func (d *Dashboard) events(c *gin.Context) {
	ch, initial, err := d.hub.subscribe()
	if err != nil {
		fail(c, http.StatusServiceUnavailable, "unavailable", err.Error())
		return
	}
	defer d.hub.unsubscribe(ch)
	h := c.Writer.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // let reverse proxies pass each event at once
	c.Status(http.StatusOK)
	for _, msg := range initial {
		if _, err := c.Writer.Write(msg); err != nil {
			return
		}
	}
	c.Writer.Flush()
	done := c.Request.Context().Done()
	for {
		select {
		case <-done:
			return
		case msg, ok := <-ch:
			if !ok {
				return
			}
			if _, err := c.Writer.Write(msg); err != nil {
				return
			}
			c.Writer.Flush()
		}
	}
}
