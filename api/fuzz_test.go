package api_test

import (
	"encoding/json"
	"path"
	"strings"
	"testing"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/subscriptions"
)

// FuzzParseCreateJob feeds arbitrary bodies to the POST /v1/jobs decoder:
// it must never panic, and whatever it accepts must be a job the workers can
// run: a known kind, a valid user id, no client-chosen tier, a clean absolute
// target or a positive result id. With analysis roots, an accepted target
// is one of them or below one. Seed corpus: testdata/fuzz/FuzzParseCreateJob.
//
//	go test -run '^$' -fuzz FuzzParseCreateJob -fuzztime 30s ./api/
func FuzzParseCreateJob(f *testing.F) {
	f.Add([]byte(`{"kind":"analysis","user_id":"u_1","args":{"target":"/srv/a"}}`))
	f.Add([]byte(`{"kind":"specview","user_id":"u_1","args":{"analysis_result_id":7},"scheduled":true}`))
	f.Add([]byte(`{"kind":"analysis","user_id":"u","tier":"enterprise","args":{"target":"/a"}}`))
	f.Add([]byte(`{"kind":"analysis","user_id":"u_1","args":{"target":"/srv/reposX/a"}}`))
	f.Add([]byte(`{"kind":"analysis","user_id":"u_1","args":{"target":"/data/checkouts/b"}}`))
	roots := []string{"/srv/repos", "/data"}
	inRoots, anywhere := rootsRegistry(f, roots), rootsRegistry(f, nil)
	f.Fuzz(func(t *testing.T, body []byte) {
		// The same body against roots: accepted only inside them, and then
		// accepted without roots too.
		if _, rooted, err := api.ParseCreateJob(body, inRoots); err == nil {
			if args, ok := rooted.Args.(jobs.AnalysisArgs); ok {
				inside := args.Target == "/srv/repos" || strings.HasPrefix(args.Target, "/srv/repos/") ||
					args.Target == "/data" || strings.HasPrefix(args.Target, "/data/")
				if !inside {
					t.Fatalf("accepted target %q outside the roots %q", args.Target, roots)
				}
			}
			if _, _, err := api.ParseCreateJob(body, anywhere); err != nil {
				t.Fatalf("accepted with roots, refused without: %q: %v", body, err)
			}
		}

		_, job, err := api.ParseCreateJob(body, anywhere)
		if err != nil {
			return
		}
		// Accepted: no key may name a tier, in any letter case, at the top
		// or in args.
		var top map[string]json.RawMessage
		if json.Unmarshal(body, &top) == nil {
			var args map[string]json.RawMessage
			_ = json.Unmarshal(top["args"], &args)
			for _, m := range []map[string]json.RawMessage{top, args} {
				for k := range m {
					if strings.EqualFold(k, "tier") {
						t.Fatalf("accepted a body with key %q: %q", k, body)
					}
				}
			}
		}
		// The tenant is the request's user id; args carry no user id of
		// the client's (producer.Insert fills it in from the tenant).
		if err := subscriptions.CheckUserID(job.Tenant); err != nil {
			t.Fatalf("accepted a bad user id %q: %v", job.Tenant, err)
		}
		switch args := job.Args.(type) {
		case jobs.AnalysisArgs:
			if args.Tier != "" || args.UserID != "" {
				t.Fatalf("accepted a client-chosen tier or user id: %q", body)
			}
			if !path.IsAbs(args.Target) || path.Clean(args.Target) != args.Target || strings.ContainsRune(args.Target, 0) {
				t.Fatalf("accepted a bad target %q", args.Target)
			}
		case jobs.SpecViewArgs:
			if args.Tier != "" || args.AnalysisResultID <= 0 {
				t.Fatalf("accepted bad specview args %+v from %q", args, body)
			}
		default:
			t.Fatalf("accepted kind %T from %q", job.Args, body)
		}
	})
}
