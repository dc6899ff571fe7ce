// Command taskforge-healthcheck is the health probe of TaskForge's container image.
// The image holds no shell and no HTTP client, so its HEALTHCHECK (and the compose
// file's) runs this: it GETs /healthz of the `taskforge serve` process in the same
// container and exits 0 when that answers 200 within the timeout, 1 otherwise.
//
// The address comes from TASKFORGE_LISTEN, as serve reads it (default ":8080"; a
// wildcard host means 127.0.0.1). An argument, a full URL, replaces it: for example
// http://127.0.0.1:8080/readyz to also require PostgreSQL and Redis.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

// timeout bounds the whole probe; Docker's own timeout should be longer.
const timeout = 2 * time.Second

func main() {
	target := probeURL(os.Getenv("TASKFORGE_LISTEN"))
	if len(os.Args) > 1 {
		target = os.Args[1]
	}
	if err := probe(context.Background(), target, timeout); err != nil {
		fmt.Fprintln(os.Stderr, "taskforge-healthcheck:", err)
		os.Exit(1)
	}
}

// probeURL returns the /healthz URL of a server listening on listen (host:port).
func probeURL(listen string) string {
	if listen == "" {
		listen = ":8080"
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil { // let the request report it
		return "http://" + listen + "/healthz"
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/healthz"
}

// probe GETs url and reports an error unless it answers 200 within timeout.
func probe(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return nil
}
