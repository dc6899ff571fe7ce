package api

import (
	"strings"

	"github.com/gin-gonic/gin"
)

// minimalAnswer reports whether the request asks, with the header
// "Prefer: return=minimal" (RFC 7240), for an answer that leaves out what the
// caller already knows, and if so says on the answer that it was honoured
// (Preference-Applied). The batch enqueue then answers each task with its id only,
// and the batch ack each result without its done task: a bulk loader or a batched
// worker spends neither serve's time encoding a thousand task objects nor its own
// decoding them. Other routes ignore the preference, as RFC 7240 allows.
func minimalAnswer(c *gin.Context) bool {
	for _, header := range c.Request.Header.Values("Prefer") {
		for _, pref := range strings.Split(header, ",") {
			token, _, _ := strings.Cut(pref, ";")
			name, value, _ := strings.Cut(strings.TrimSpace(token), "=")
			if strings.EqualFold(strings.TrimSpace(name), "return") &&
				strings.EqualFold(strings.Trim(strings.TrimSpace(value), `"`), "minimal") {
				c.Header("Preference-Applied", "return=minimal")
				return true
			}
		}
	}
	return false
}
