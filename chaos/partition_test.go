package chaos

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// gatedProxy forwards TCP connections to one backend, PostgreSQL or Redis, for one
// replica. Cut blackholes it: connections stay open and new ones are accepted, but
// nothing is forwarded either way until Restore, as on a network partition whose
// packets TCP retransmits once it heals. The replica keeps running throughout.
type gatedProxy struct {
	ln      net.Listener
	backend string

	mu     sync.Mutex
	cut    bool
	open   chan struct{} // closed while traffic flows; replaced on Cut
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

func startGatedProxy(t *testing.T, backend string) *gatedProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedProxy{ln: ln, backend: backend, open: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(g.open)
	g.wg.Add(1)
	go g.serve()
	t.Cleanup(g.close)
	return g
}

func (g *gatedProxy) Addr() string { return g.ln.Addr().String() }

// Cut stops all traffic through the proxy.
func (g *gatedProxy) Cut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.cut {
		g.cut = true
		g.open = make(chan struct{})
	}
}

// Restore lets the traffic held since Cut through.
func (g *gatedProxy) Restore() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cut {
		g.cut = false
		close(g.open)
	}
}

// wait blocks while the proxy is cut.
func (g *gatedProxy) wait() {
	g.mu.Lock()
	ch := g.open
	g.mu.Unlock()
	<-ch
}

func (g *gatedProxy) serve() {
	defer g.wg.Done()
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			g.handle(c)
		}()
	}
}

func (g *gatedProxy) track(c net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.conns[c] = struct{}{}
	return true
}

func (g *gatedProxy) untrack(c net.Conn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.conns, c)
}

func (g *gatedProxy) handle(client net.Conn) {
	defer client.Close()
	if !g.track(client) {
		return
	}
	defer g.untrack(client)
	g.wait() // a connection made during a cut reaches the backend after it
	server, err := net.DialTimeout("tcp", g.backend, time.Second)
	if err != nil {
		return // the backend is down (a fault of its own): the client sees the close
	}
	defer server.Close()
	if !g.track(server) {
		return
	}
	defer g.untrack(server)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				g.wait()
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done
	<-done
}

func (g *gatedProxy) close() {
	_ = g.ln.Close()
	g.Restore()
	g.mu.Lock()
	g.closed = true
	for c := range g.conns {
		_ = c.Close()
	}
	g.mu.Unlock()
	g.wg.Wait()
}

// withHostPort returns url with its host:port replaced by addr.
func withHostPort(url, addr string) string {
	i := strings.Index(url, "@")
	if i < 0 {
		i = strings.Index(url, "://") + 2
	}
	j := strings.IndexAny(url[i+1:], "/?")
	if j < 0 {
		return url[:i+1] + addr
	}
	return url[:i+1] + addr + url[i+1+j:]
}

// postmasterGroup is the process group of the PostgreSQL server (the postmaster
// runs in a group of its own, its backends with it), read from postmaster.pid.
func postmasterGroup(dataDir string) (int, error) {
	b, err := os.ReadFile(dataDir + "/postmaster.pid")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(line))
}

// redisPID asks a Redis server for its process id (INFO server).
func redisPID(addr string) (int, error) {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return 0, err
	}
	if _, err := conn.Write([]byte("*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")); err != nil {
		return 0, err
	}
	r := bufio.NewReader(conn)
	head, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(head, "$") {
		return 0, fmt.Errorf("INFO answered %q: %v", head, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil {
		return 0, err
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("INFO server without process_id")
}

// stopFor SIGSTOPs pid (or, negative, a process group) for d, then SIGCONTs it.
func stopFor(pid int, d time.Duration) error {
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return err
	}
	hold(d) // the pause's length: part of the schedule
	return syscall.Kill(pid, syscall.SIGCONT)
}
