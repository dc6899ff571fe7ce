package telemetry

import (
	"log/slog"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
)

// Middleware counts and times every request by route, and logs it: at debug level
// when it succeeded, info for a client error, error for a server error.
func (t *Telemetry) Middleware() gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		if t == nil {
			return
		}
		route := c.FullPath()
		if route == "" {
			route = "unmatched"
		}
		status := c.Writer.Status()
		elapsed := time.Since(start)
		t.httpRequests.WithLabelValues(route, c.Request.Method, strconv.Itoa(status)).Inc()
		t.httpDuration.WithLabelValues(route, c.Request.Method).Observe(elapsed.Seconds())
		level := slog.LevelDebug
		switch {
		case status >= 500:
			level = slog.LevelError
		case status >= 400:
			level = slog.LevelInfo
		}
		if t.log.Enabled(c, level) {
			t.log.LogAttrs(c, level, "request", slog.String("method", c.Request.Method),
				slog.String("route", route), slog.String("path", c.Request.URL.Path),
				slog.Int("status", status), slog.Int64("duration_ms", elapsed.Milliseconds()),
				slog.String("remote", c.ClientIP()))
		}
	}
}
