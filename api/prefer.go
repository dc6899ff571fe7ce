package api

import (
	"strings"

	"github.com/gin-gonic/gin"
)

// prefersMinimal reports whether the request asks, with the header
// "Prefer: return=minimal" (RFC 7240), for an answer that leaves out what the
// caller already knows. The batch enqueue then answers each task with its id only,
// and the batch ack each result without its done task: a bulk loader or a batched
// worker spends neither serve's time encoding a thousand task objects nor its own
// decoding them, and serve reads back from PostgreSQL only what it needs itself.
// Other routes ignore the preference, as RFC 7240 allows.
func prefersMinimal(c *gin.Context) bool {
	for _, header := range c.Request.Header.Values("Prefer") {
		for _, pref := range strings.Split(header, ",") {
			token, _, _ := strings.Cut(pref, ";")
			name, value, _ := strings.Cut(strings.TrimSpace(token), "=")
			if strings.EqualFold(strings.TrimSpace(name), "return") &&
				strings.EqualFold(strings.Trim(strings.TrimSpace(value), `"`), "minimal") {
				return true
			}
		}
	}
	return false
}

// minimalApplied says on a successful answer that the preference was honoured
// (Preference-Applied); an error answers nothing minimal, and does not say so.
func minimalApplied(c *gin.Context) {
	c.Header("Preference-Applied", "return=minimal")
}
