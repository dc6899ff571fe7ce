package bench

import (
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"sync"
	"syscall"
)

// ServeProfiler profiles the process's CPU during the windows the harness marks:
// SIGUSR1 starts a CPU profile into its file, SIGUSR2 ends and writes it. Only
// the first window is kept. `taskforge bench serve-profiled` runs serve under one,
// since serve itself exposes no pprof endpoint.
type ServeProfiler struct {
	path string
	sig  chan os.Signal
	quit chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	file    *os.File
	written bool
	err     error
}

// StartServeProfiler starts listening for SIGUSR1 and SIGUSR2; path is the
// profile to write.
func StartServeProfiler(path string) *ServeProfiler {
	p := &ServeProfiler{path: path, sig: make(chan os.Signal, 2), quit: make(chan struct{})}
	signal.Notify(p.sig, syscall.SIGUSR1, syscall.SIGUSR2)
	p.wg.Go(func() {
		for {
			select {
			case <-p.quit:
				return
			case s := <-p.sig:
				if s == syscall.SIGUSR1 {
					p.begin()
				} else {
					p.end()
				}
			}
		}
	})
	return p
}

func (p *ServeProfiler) begin() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.file != nil || p.written {
		return
	}
	f, err := os.Create(p.path)
	if err != nil {
		p.err = fmt.Errorf("cpu profile: %w", err)
		return
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		p.err = fmt.Errorf("cpu profile: %w", err)
		return
	}
	p.file = f
}

func (p *ServeProfiler) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.file == nil {
		return
	}
	pprof.StopCPUProfile()
	if err := p.file.Close(); err != nil && p.err == nil {
		p.err = fmt.Errorf("cpu profile: %w", err)
	}
	p.file, p.written = nil, true
}

// Stop ends a window still open, stops listening, and returns the first error met.
func (p *ServeProfiler) Stop() error {
	signal.Stop(p.sig)
	close(p.quit)
	p.wg.Wait()
	p.end()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}
