//go:build chaos

package chaos_test

import (
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// pathProxy is the network path between one process and the database: a
// TCP proxy on a loopback port that forwards bytes both ways unchanged, and
// that can go silent. While silent it forwards nothing in either direction
// and closes nothing: what each side sends waits (in the proxy, then in the
// kernel's buffers, then in the sender's writes), as on a network path that
// lost its packets, where neither side hears anything and TCP keeps
// retrying. When the path comes back, everything sent meanwhile is
// delivered in order, a close included: a statement the process sent
// before it gave up on a connection still reaches the server, late (TCP
// would retransmit it, then the FIN). A killed process, by contrast, closes
// its sockets at once (on loopback the peer sees a FIN or a reset), which
// is the worker-crash scenario.
//
// What it cannot show: the process's kernel is the proxy's neighbour on
// loopback, so its segments are acknowledged while the path is silent. TCP
// keepalives and retransmission timeouts never fire; only the process's
// own timeouts (context deadlines, connect_timeout) notice the silence.
type pathProxy struct {
	listener net.Listener
	upstream string // the server's host:port

	mu     sync.Mutex
	open   chan struct{} // closed while the path forwards; a new, open one while it is silent
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// newPathProxy starts a proxy to upstream (host:port) and stops it when the
// test ends.
func newPathProxy(t *testing.T, upstream string) *pathProxy {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &pathProxy{listener: listener, upstream: upstream, open: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.open)
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// url is databaseURL, which names the proxy's upstream, through the proxy.
func (p *pathProxy) url(t *testing.T, databaseURL string) string {
	t.Helper()
	require.Contains(t, databaseURL, "@"+p.upstream+"/", "the database URL does not name the proxy's upstream")
	return strings.Replace(databaseURL, "@"+p.upstream+"/", "@"+p.listener.Addr().String()+"/", 1)
}

// silence stops forwarding, in both directions, and leaves every
// connection open.
func (p *pathProxy) silence() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default: // silent already
	}
}

// resume forwards again, first what waited.
func (p *pathProxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

// wait blocks while the path is silent.
func (p *pathProxy) wait() {
	p.mu.Lock()
	open := p.open
	p.mu.Unlock()
	<-open
}

// accept takes connections until close. A connection made while the path
// is silent is accepted (the kernel has completed its handshake anyway)
// and reaches the server only when the path comes back.
func (p *pathProxy) accept() {
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return // closed
		}
		if !p.add(client) {
			return
		}
		p.wg.Go(func() {
			defer p.remove(client)
			p.wait()
			server, err := net.Dial("tcp", p.upstream)
			if err != nil {
				return
			}
			if !p.add(server) {
				return
			}
			defer p.remove(server)
			var both sync.WaitGroup
			both.Go(func() { p.pipe(server, client) })
			p.pipe(client, server)
			both.Wait()
		})
	}
}

// pipe copies src to dst, holding each chunk while the path is silent,
// and passes src's end on (a half close) once the path forwards. After an
// error on either side it closes both, which ends the other direction too.
func (p *pathProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.wait()
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				_, _ = dst.Close(), src.Close()
				return
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, io.EOF): // the sender is done writing
			if tcp, ok := dst.(*net.TCPConn); ok {
				_ = tcp.CloseWrite()
			}
			return
		default:
			_, _ = dst.Close(), src.Close()
			return
		}
	}
}

// close stops accepting, closes every connection and waits for the
// forwarding to end (a silent path is opened first, so nothing waits).
func (p *pathProxy) close() {
	_ = p.listener.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.resume()
	p.wg.Wait()
}

// add registers c for close, or closes it when the proxy is closed
// already and reports false.
func (p *pathProxy) add(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

// remove closes c and forgets it.
func (p *pathProxy) remove(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = c.Close()
	delete(p.conns, c)
}
