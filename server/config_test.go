package server

import (
	"strings"
	"testing"
)

// TestListenDatabaseURL: empty keeps LISTEN on a connection like the pool's and
// the pool's prepared statements; a URL or "off" says the pool goes through a
// transaction pooler; a URL that does not parse is refused at start.
func TestListenDatabaseURL(t *testing.T) {
	base := Config{DatabaseURL: "postgres://bouncer:6432/tf", RedisURL: "redis://r:6379"}.WithDefaults()
	for _, tc := range []struct {
		listen          string
		wantHost        string // "" for no connection of its own
		wantOff, pooled bool
		wantErr         string
	}{
		{listen: ""},
		{listen: "postgres://direct:5432/tf", wantHost: "direct", pooled: true},
		{listen: "off", wantOff: true, pooled: true},
		{listen: "OFF", wantOff: true, pooled: true},
		{listen: "postgres://direct:notaport/tf", wantErr: "TASKFORGE_LISTEN_DATABASE_URL"},
	} {
		c := base
		c.ListenDatabaseURL = tc.listen
		err := c.Validate()
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: Validate() = %v, want an error naming %s", tc.listen, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: Validate() = %v", tc.listen, err)
			continue
		}
		conn, off, _ := c.listen()
		host := ""
		if conn != nil {
			host = conn.Host
		}
		if host != tc.wantHost || off != tc.wantOff || c.pooled() != tc.pooled {
			t.Errorf("%q: LISTEN host %q off %v pooled %v, want %q %v %v", tc.listen, host, off, c.pooled(), tc.wantHost, tc.wantOff, tc.pooled)
		}
	}
}

// TestBulkDutyMustBeAShareOfTime: above 0 and at most 1, zero being the default.
func TestBulkDutyMustBeAShareOfTime(t *testing.T) {
	base := Config{DatabaseURL: "postgres://db:5432/tf", RedisURL: "redis://r:6379"}.WithDefaults()
	for _, tc := range []struct {
		duty float64
		ok   bool
	}{{0, true}, {0.5, true}, {1, true}, {-0.1, false}, {1.01, false}} {
		c := base
		c.BulkDuty = tc.duty
		err := c.Validate()
		if tc.ok && err != nil {
			t.Errorf("BulkDuty %g: Validate() = %v", tc.duty, err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), "TASKFORGE_BULK_DUTY")) {
			t.Errorf("BulkDuty %g: Validate() = %v, want an error naming TASKFORGE_BULK_DUTY", tc.duty, err)
		}
	}
}
