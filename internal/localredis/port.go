package localredis

import (
	"crypto/rand"
	"fmt"
	"net"
	"strconv"
)

// freePortLow and freePortHigh bound the ports FreePort tries first: below
// Linux's default ephemeral range (32768-60999) and above the well-known ones.
const (
	freePortLow  = 20000
	freePortHigh = 32000
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago. It picks
// below the kernel's ephemeral range (ip_local_port_range): a port the kernel
// hands out for listen(":0") is also one it hands out as the source port of the
// next outgoing connection, so on a box busy with connections (a chaos run, a
// parallel suite) such a port was sometimes taken before a server listened on it.
// Only when 64 random tries in that range fail does it take one from the kernel.
func FreePort() (int, error) {
	var b [2]byte
	for range 64 {
		_, _ = rand.Read(b[:]) // never fails
		p := freePortLow + (int(b[0])<<8|int(b[1]))%(freePortHigh-freePortLow)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err == nil {
			_ = l.Close()
			return p, nil
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
