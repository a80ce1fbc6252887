package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgconn"
)

// wireProxy is a PostgreSQL wire-protocol proxy in front of one worker
// process of the scaleout scenario: the process connects to it as to its
// database (wireURL), and it forwards every byte both ways unchanged while
// it counts what the process sends: the statements it runs, the fetches
// among them (isFetch: River's JobGetAvailable), and the connections it
// holds. It is how the bench counts the statements of a process that is not
// its own (the isolation scenario counts its own worker's with a pgx
// tracer); the process runs as it would against the server.
//
// A statement is a Bind (an execution of a prepared or unnamed statement:
// pgx sends one per query, batched or not) or a simple Query message. The
// proxy speaks no TLS: it refuses the process's SSLRequest and
// GSSENCRequest (the process then goes on in plain text, as sslmode=prefer
// does), and connects to the server in plain text.
type wireProxy struct {
	listener        net.Listener
	network, server string // the server's address: tcp host:port or a unix socket

	statements, fetches atomic.Int64
	open, peak          atomic.Int64 // connections open now, and the most at once

	kindsMu sync.Mutex
	kinds   map[string]int64 // statements by kind (statementKind)

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// Codes of the untagged messages a client may send before its startup
// message (PostgreSQL's protocol, "Message Formats").
const (
	sslRequestCode    = 80877103
	gssencRequestCode = 80877104
	cancelRequestCode = 80877102
)

// fetchPrefix starts the SQL of River's fetch, JobGetAvailable: sqlc's
// name comment, which River's driver sends with the statement.
const fetchPrefix = "-- name: " + fetchKind + " "

// isFetch reports whether sql is River's fetch (JobGetAvailable).
func isFetch(sql string) bool { return strings.HasPrefix(sql, fetchPrefix) }

// newWireProxy listens on a loopback port for connections to the server of
// databaseURL; serve accepts them.
func newWireProxy(databaseURL string) (*wireProxy, error) {
	cfg, err := pgconn.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %w", err)
	}
	p := &wireProxy{network: "tcp", server: net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))),
		conns: map[net.Conn]struct{}{}, kinds: map[string]int64{}}
	if strings.HasPrefix(cfg.Host, "/") { // a unix socket's directory
		p.network, p.server = "unix", filepath.Join(cfg.Host, ".s.PGSQL."+strconv.Itoa(int(cfg.Port)))
	}
	if p.listener, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("wire proxy: %w", err)
	}
	return p, nil
}

// wireURL is databaseURL with the proxy in place of the server, TLS off and
// application name appName.
func (p *wireProxy) wireURL(databaseURL, appName string) (string, error) {
	cfg, err := pgconn.ParseConfig(databaseURL)
	if err != nil {
		return "", fmt.Errorf("parse database URL: %w", err)
	}
	u := url.URL{Scheme: "postgres", Host: p.listener.Addr().String(), Path: "/" + cfg.Database, User: url.User(cfg.User)}
	if cfg.Password != "" {
		u.User = url.UserPassword(cfg.User, cfg.Password)
	}
	q := url.Values{}
	for k, v := range cfg.RuntimeParams {
		q.Set(k, v)
	}
	q.Set("sslmode", "disable")
	q.Set("application_name", appName)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// serve accepts and forwards connections until close.
func (p *wireProxy) serve() {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			client, err := p.listener.Accept()
			if err != nil {
				return // closed
			}
			if !p.add(client) {
				return
			}
			p.connected()
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer p.open.Add(-1)
				defer p.remove(client)
				p.forward(client)
			}()
		}
	}()
}

// close stops accepting, closes every connection and waits for their
// forwarding to end.
func (p *wireProxy) close() {
	_ = p.listener.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// add registers c for close to close, or closes it when the proxy is
// closed already and reports false.
func (p *wireProxy) add(c net.Conn) bool {
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
func (p *wireProxy) remove(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = c.Close()
	delete(p.conns, c)
}

// connected counts a connection of the process opened.
func (p *wireProxy) connected() {
	n := p.open.Add(1)
	for {
		peak := p.peak.Load()
		if n <= peak || p.peak.CompareAndSwap(peak, n) {
			return
		}
	}
}

// wireCount is what a proxy has counted so far: statements, fetches among
// them, and statements by kind.
type wireCount struct {
	statements, fetches int64
	kinds               map[string]int64
}

func (p *wireProxy) count() wireCount {
	p.kindsMu.Lock()
	defer p.kindsMu.Unlock()
	return wireCount{statements: p.statements.Load(), fetches: p.fetches.Load(), kinds: maps.Clone(p.kinds)}
}

// counted counts one statement of kind.
func (p *wireProxy) counted(kind string) {
	p.statements.Add(1)
	if kind == fetchKind {
		p.fetches.Add(1)
	}
	p.kindsMu.Lock()
	p.kinds[kind]++
	p.kindsMu.Unlock()
}

// fetchKind is the kind of River's fetch (statementKind).
const fetchKind = "JobGetAvailable"

// statementKind names a statement for the tallies: its sqlc name (River's
// statements: "-- name: JobGetAvailable :many" is JobGetAvailable), else
// its first line, at most 48 bytes.
func statementKind(sql []byte) string {
	sql = bytes.TrimSpace(sql)
	if rest, ok := bytes.CutPrefix(sql, []byte("-- name: ")); ok {
		name, _, _ := bytes.Cut(rest, []byte(" "))
		return string(name)
	}
	line, _, _ := bytes.Cut(sql, []byte("\n"))
	line = bytes.TrimSpace(line)
	if len(line) > 48 {
		line = line[:48]
	}
	return string(line)
}

// forward connects client to the server and copies both ways until either
// side closes: the server's bytes as they are, the client's message by
// message, counted.
func (p *wireProxy) forward(client net.Conn) {
	var d net.Dialer
	server, err := d.DialContext(context.Background(), p.network, p.server)
	if err != nil {
		return // the client sees its connection closed, and says so
	}
	if !p.add(server) {
		return
	}
	defer p.remove(server)

	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(client, server)
		_ = client.Close()
	}()
	_ = p.clientMessages(client, server)
	_ = server.Close()
	<-done
}

// clientMessages copies the client's messages to server: the untagged ones
// before the startup message (TLS and GSSAPI requests refused), the startup
// message, then tagged messages, counting statements and fetches. It
// returns when either side closes.
func (p *wireProxy) clientMessages(client, server net.Conn) error {
	r := bufio.NewReaderSize(client, 32<<10)
	w := bufio.NewWriterSize(server, 32<<10)
	var head [5]byte
	var body []byte
	for {
		if _, err := io.ReadFull(r, head[:4]); err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint32(head[:4])) - 4
		if n < 4 || n > 10_000 {
			return errors.New("wire proxy: bad startup message")
		}
		body = grow(body, n)
		if _, err := io.ReadFull(r, body); err != nil {
			return err
		}
		switch binary.BigEndian.Uint32(body[:4]) {
		case sslRequestCode, gssencRequestCode:
			if _, err := client.Write([]byte{'N'}); err != nil {
				return err
			}
			continue
		}
		if _, err := w.Write(head[:4]); err != nil {
			return err
		}
		if _, err := w.Write(body); err != nil {
			return err
		}
		if err := w.Flush(); err != nil {
			return err
		}
		if binary.BigEndian.Uint32(body[:4]) == cancelRequestCode {
			_, err := io.Copy(server, r)
			return err
		}
		break
	}

	statements := map[string]string{} // prepared statement name → its kind
	for {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint32(head[1:])) - 4
		if n < 0 {
			return errors.New("wire proxy: bad message length")
		}
		body = grow(body, n)
		if _, err := io.ReadFull(r, body); err != nil {
			return err
		}
		switch head[0] {
		case 'P': // Parse: statement name, query, …
			name, rest := cstring(body)
			query, _ := cstring(rest)
			statements[string(name)] = statementKind(query)
		case 'B': // Bind: portal name, statement name, …
			_, rest := cstring(body)
			name, _ := cstring(rest)
			p.counted(statements[string(name)])
		case 'Q': // Query: the statement text
			query, _ := cstring(body)
			p.counted(statementKind(query))
		}
		if _, err := w.Write(head[:]); err != nil {
			return err
		}
		if _, err := w.Write(body); err != nil {
			return err
		}
		// A client sends each message whole without waiting for the
		// server: flush once what it sent so far has been read.
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
}

// grow is buf with length n, reusing its array when large enough.
func grow(buf []byte, n int) []byte {
	if cap(buf) < n {
		return make([]byte, n)
	}
	return buf[:n]
}

// cstring splits b at its first NUL: the string before it and the bytes
// after.
func cstring(b []byte) (str, rest []byte) {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return b, nil
	}
	return b[:i], b[i+1:]
}
