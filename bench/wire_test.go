package bench

import (
	"context"
	"io"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
)

// TestWireProxy: every statement a client sends through the proxy is
// counted once, prepared (each execution) or simple, alone or batched;
// River's fetch among them by its SQL; and the connections it holds. The
// client goes on as against the server: refused TLS, cancel requests, and
// the bytes of every message as it sent them.
func TestWireProxy(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		proxy *wireProxy
		url   string // the test server's, through the proxy
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		testdb.New(t) // creates the test database if needed
		proxy, err := newWireProxy(testdb.URL())
		require.NoError(t, err)
		proxy.serve()
		t.Cleanup(proxy.close)
		url, err := proxy.wireURL(testdb.URL(), "tierq_wire_test")
		require.NoError(t, err)
		return &testBundle{proxy: proxy, url: url}
	}

	connect := func(t *testing.T, url string) *pgx.Conn {
		t.Helper()
		conn, err := pgx.Connect(context.Background(), url)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		return conn
	}

	t.Run("CountsWhatAProcessSends", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		bundle := setup(t)
		proxy := bundle.proxy

		conn := connect(t, bundle.url)
		var name string
		require.NoError(t, conn.QueryRow(ctx, `SELECT current_setting('application_name')`).Scan(&name))
		require.Equal(t, "tierq_wire_test", name)
		before := proxy.count()

		_, err := conn.Exec(ctx, `SELECT 1`) // simple protocol: no arguments
		require.NoError(t, err)
		fetch := fetchPrefix + ":many\nSELECT $1::int"
		for range 2 { // prepared once, executed twice
			var n int
			require.NoError(t, conn.QueryRow(ctx, fetch, 7).Scan(&n))
		}
		batch := &pgx.Batch{}
		batch.Queue(`SELECT $1::int`, 1)
		batch.Queue(fetch, 2)
		batch.Queue(`SELECT $1::text`, "x")
		require.NoError(t, conn.SendBatch(ctx, batch).Close())
		got := proxy.count()
		require.Equal(t, wireCount{statements: 6, fetches: 3}, wireCount{statements: got.statements - before.statements, fetches: got.fetches - before.fetches})
		require.Equal(t, int64(1), got.kinds["SELECT 1"]-before.kinds["SELECT 1"])
		require.Equal(t, int64(3), got.kinds[fetchKind]-before.kinds[fetchKind])

		other := connect(t, bundle.url)
		require.Equal(t, int64(2), proxy.open.Load())
		require.NoError(t, other.Close(ctx))
		require.NoError(t, conn.Close(ctx))
		require.Eventually(t, func() bool { return proxy.open.Load() == 0 }, 5*time.Second, 10*time.Millisecond)
		require.Equal(t, int64(2), proxy.peak.Load())
	})

	t.Run("RefusesTLS", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		bundle := setup(t)
		withSSLMode := func(mode string) string {
			u, err := url.Parse(bundle.url)
			require.NoError(t, err)
			q := u.Query()
			q.Set("sslmode", mode)
			u.RawQuery = q.Encode()
			return u.String()
		}

		// The refusal is the proxy's own (the test server may well speak
		// TLS): a client that requires TLS is told no.
		_, err := pgx.Connect(ctx, withSSLMode("require"))
		require.ErrorContains(t, err, "server refused TLS connection")

		// sslmode=prefer asks for TLS first, and goes on in plain text on
		// a new connection when refused.
		conn := connect(t, withSSLMode("prefer"))
		var n int
		require.NoError(t, conn.QueryRow(ctx, `SELECT $1::int`, 5).Scan(&n))
		require.Equal(t, 5, n)
		require.Equal(t, int64(1), bundle.proxy.count().statements)
	})

	t.Run("ForwardsCancelRequest", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		bundle := setup(t)

		conn := connect(t, bundle.url)
		watch := connect(t, bundle.url)
		pid := conn.PgConn().PID()
		errc := make(chan error, 1)
		go func() {
			_, err := conn.Exec(ctx, `SELECT pg_sleep(60)`)
			errc <- err
		}()
		require.Eventually(t, func() bool {
			var active bool
			err := watch.QueryRow(ctx, `SELECT state = 'active' FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&active)
			return err == nil && active
		}, 10*time.Second, 10*time.Millisecond)

		// pgconn sends the cancel request on a connection of its own, to
		// the proxy it is connected to.
		require.NoError(t, conn.PgConn().CancelRequest(ctx))
		select {
		case err := <-errc:
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr)
			require.Equal(t, "57014", pgErr.Code) // query_canceled
		case <-time.After(10 * time.Second):
			t.Fatal("the query was not canceled")
		}
	})

	t.Run("ForwardsClientBytesUnchanged", func(t *testing.T) {
		t.Parallel()
		// A server of the test's own, that records what it gets.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		t.Cleanup(func() { _ = ln.Close() })
		received := make(chan []byte, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				received <- nil
				return
			}
			defer c.Close()
			b, _ := io.ReadAll(c)
			received <- b
		}()
		proxy, err := newWireProxy("postgres://u@" + ln.Addr().String() + "/db")
		require.NoError(t, err)
		proxy.serve()
		t.Cleanup(proxy.close)

		client, err := net.Dial("tcp", proxy.listener.Addr().String())
		require.NoError(t, err)
		defer client.Close()
		require.NoError(t, client.SetDeadline(time.Now().Add(10*time.Second)))
		for _, request := range []pgproto3.FrontendMessage{&pgproto3.SSLRequest{}, &pgproto3.GSSEncRequest{}} {
			b, err := request.Encode(nil)
			require.NoError(t, err)
			_, err = client.Write(b)
			require.NoError(t, err)
			answer := make([]byte, 1)
			_, err = io.ReadFull(client, answer)
			require.NoError(t, err)
			require.Equal(t, "N", string(answer), "%T", request)
		}

		fetch := fetchPrefix + ":many\nSELECT $1::text, $2::text"
		var sent []byte
		for _, msg := range []pgproto3.FrontendMessage{
			&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30, Parameters: map[string]string{"user": "u"}},
			// Both have the tag 'p', and a NUL before their end.
			&pgproto3.SASLInitialResponse{AuthMechanism: "SCRAM-SHA-256", Data: []byte("n,,n=,r=nonce")},
			&pgproto3.SASLResponse{Data: []byte("c=biws,r=nonce\x00,p=proof")},
			&pgproto3.Parse{Name: "s1", Query: fetch, ParameterOIDs: []uint32{25, 25}},
			&pgproto3.Describe{ObjectType: 'S', Name: "s1"},
			&pgproto3.Sync{},
			&pgproto3.Bind{PreparedStatement: "s1", ParameterFormatCodes: []int16{0}, Parameters: [][]byte{nil, {}}, ResultFormatCodes: []int16{1, 0}},
			&pgproto3.Execute{},
			&pgproto3.Sync{},
			&pgproto3.Query{String: "SELECT 1"},
			&pgproto3.Terminate{},
		} {
			sent, err = msg.Encode(sent)
			require.NoError(t, err)
		}
		_, err = client.Write(sent)
		require.NoError(t, err)
		require.NoError(t, client.(*net.TCPConn).CloseWrite())

		select {
		case got := <-received:
			require.Equal(t, sent, got)
		case <-time.After(10 * time.Second):
			t.Fatal("the server got no end of the client's messages")
		}
		got := proxy.count()
		require.Equal(t, wireCount{statements: 2, fetches: 1, kinds: map[string]int64{fetchKind: 1, "SELECT 1": 1}}, got)
	})
}

func TestWithAppName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, give, want string
	}{
		{name: "url", give: "postgres://u@h:5432/db?sslmode=disable", want: "postgres://u@h:5432/db?application_name=w0&sslmode=disable"},
		{name: "url replaces", give: "postgres://h/db?application_name=psql", want: "postgres://h/db?application_name=w0"},
		{name: "keyword/value", give: "host=h dbname=db", want: "host=h dbname=db application_name=w0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := withAppName(tt.give, "w0")
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}
