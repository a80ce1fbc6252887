package bench

import (
	"bufio"
	"bytes"
	"context"
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
	"github.com/jackc/pgx/v5/pgproto3"
)

// wireProxy is a PostgreSQL wire-protocol proxy in front of one worker
// process of the scaleout scenario: the process connects to it as to its
// database (wireURL), and it forwards every message both ways unchanged
// while it counts what the process sends: the statements it runs, the fetches
// among them (isFetch: River's JobGetAvailable), and the connections it
// holds. It is how the bench counts the statements of a process that is not
// its own (the isolation scenario counts its own worker's with a pgx
// tracer); the process runs as it would against the server. The client's
// messages are decoded and re-encoded by pgproto3, which gives back the
// bytes they came as (but for the order of the startup message's
// parameters).
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

// clientMessages copies the client's messages to server, decoded by
// pgproto3 and re-encoded as they came: the untagged ones before the startup
// message (TLS and GSSAPI requests refused), the startup message, then
// tagged messages, counting statements and fetches. It returns when either
// side closes.
func (p *wireProxy) clientMessages(client, server net.Conn) error {
	b := pgproto3.NewBackend(client, client)
	var buf []byte // the message being forwarded, reused
	for {
		msg, err := b.ReceiveStartupMessage()
		if err != nil {
			return err
		}
		switch msg.(type) {
		case *pgproto3.SSLRequest, *pgproto3.GSSEncRequest:
			if _, err := client.Write([]byte{'N'}); err != nil {
				return err
			}
			continue
		}
		if buf, err = msg.Encode(buf[:0]); err != nil {
			return err
		}
		if _, err := server.Write(buf); err != nil {
			return err
		}
		if _, ok := msg.(*pgproto3.CancelRequest); ok {
			// The server closes the connection once it has read the
			// request, and a client sends nothing after it: b has read
			// nothing more that this copy would miss.
			_, err := io.Copy(server, client)
			return err
		}
		break
	}

	// Every authentication response (password, SASL, GSSAPI) has the tag
	// 'p', which pgproto3 tells apart by the server's last authentication
	// request (SetAuthType); the proxy does not read the server's messages,
	// and the default, PasswordMessage, keeps the body only up to its first
	// NUL, which would cut a SASLInitialResponse short. With SASLContinue
	// every 'p' decodes as a SASLResponse, whose data is the body as sent,
	// and re-encodes byte for byte whatever it is.
	if err := b.SetAuthType(pgproto3.AuthTypeSASLContinue); err != nil {
		return err
	}
	w := bufio.NewWriterSize(server, 32<<10)
	statements := map[string]string{} // prepared statement name → its kind
	for {
		msg, err := b.Receive()
		if err != nil {
			return err
		}
		switch msg := msg.(type) {
		case *pgproto3.Parse:
			statements[msg.Name] = statementKind([]byte(msg.Query))
		case *pgproto3.Bind:
			p.counted(statements[msg.PreparedStatement])
		case *pgproto3.Query:
			p.counted(statementKind([]byte(msg.String)))
		}
		if buf, err = msg.Encode(buf[:0]); err != nil {
			return err
		}
		if _, err := w.Write(buf); err != nil {
			return err
		}
		// A client waits for the server only after a message that asks for
		// an answer now. The server holds what it answers to Parse, Bind,
		// Describe, Execute and Close until a Sync or a Flush, which a
		// client therefore sends before it waits (a pgx query, prepare or
		// batch is such a run ending in one): those stay buffered, and a
		// batch reaches the server in one write. Everything else (Sync,
		// Flush, Query, FunctionCall, a password, CopyData, which a
		// replication client's status replies are, CopyDone, CopyFail,
		// Terminate) is flushed at once.
		switch msg.(type) {
		case *pgproto3.Parse, *pgproto3.Bind, *pgproto3.Describe, *pgproto3.Execute, *pgproto3.Close:
			// held for the Sync or Flush that follows
		default:
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
}
