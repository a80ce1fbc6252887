package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/examples/thumbnail"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/tiers"
)

// TestOpenAPIDescribesEveryRoute keeps the core document and the router in
// step: every route is described, and nothing else.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	t.Parallel()

	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(api.OpenAPI(), &doc))
	require.True(t, strings.HasPrefix(doc.OpenAPI, "3."))

	// River UI, when served, is not part of the JSON API: Patterns leaves it
	// out, and the document does not describe it.
	server := api.New(api.Config{RiverUI: http.NotFoundHandler()}, nil, nil, api.NewMetrics(nil, nil, nil))
	documented := 0
	for _, pattern := range server.Patterns() {
		method, path, ok := strings.Cut(pattern, " ")
		require.True(t, ok, pattern)
		ops, ok := doc.Paths[path]
		require.True(t, ok, "%s is not in openapi.json", path)
		_, ok = ops[strings.ToLower(method)]
		require.True(t, ok, "%s is not in openapi.json", pattern)
		documented++
	}
	operations := 0
	for _, ops := range doc.Paths {
		operations += len(ops)
	}
	require.Equal(t, documented, operations, "openapi.json describes a route the server does not have")
}

// createJobSchema is what the tests read of a document's CreateJob.
type createJobSchema struct {
	Properties struct {
		Kind struct {
			Enum []string `json:"enum"`
		} `json:"kind"`
		Args struct {
			OneOf []json.RawMessage `json:"oneOf"`
		} `json:"args"`
	} `json:"properties"`
}

// argsSchemaFields is what the tests read of one args schema.
type argsSchemaFields struct {
	Kind       string                     `json:"x-kind"`
	Properties map[string]json.RawMessage `json:"properties"`
}

// readDoc splits an OpenAPI document into its CreateJob schema and the
// rest of it.
func readDoc(t *testing.T, doc []byte) (createJobSchema, map[string]any) {
	t.Helper()
	var create struct {
		Components struct {
			Schemas struct {
				CreateJob createJobSchema `json:"CreateJob"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(doc, &create))
	var rest map[string]any
	require.NoError(t, json.Unmarshal(doc, &rest))
	delete(rest["components"].(map[string]any)["schemas"].(map[string]any), "CreateJob")
	return create.Components.Schemas.CreateJob, rest
}

// served is the document a server of registry serves at /openapi.json.
func served(t *testing.T, registry *service.Registry) []byte {
	t.Helper()
	server := api.New(api.Config{Registry: registry}, nil, nil, api.NewMetrics(nil, registry, nil))
	rec := httptest.NewRecorder()
	server.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/openapi.json", nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	return rec.Body.Bytes()
}

// TestOpenAPIKindsAreTheRegistrys keeps the documents' POST /v1/jobs in
// step with their registries: the reference app's, the reference app's
// joined with the thumbnail example's, and the mailer's. The kinds are the registry's
// kinds, in order, and each kind's args schema lists exactly the args
// type's fields but those the server sets (tier and user_id, of args that
// implement producer.TierFields).
func TestOpenAPIKindsAreTheRegistrys(t *testing.T) {
	t.Parallel()
	withThumbnails, err := thumbnail.WithReference(jobs.Deps{})
	require.NoError(t, err)
	mailer := testdb.MailerRegistry(t)
	reference := testdb.Registry(t)
	docs := map[string]struct {
		doc      func() ([]byte, error)
		registry *service.Registry
	}{
		"reference":       {func() ([]byte, error) { return api.OpenAPIFor(reference) }, reference},
		"with thumbnails": {func() ([]byte, error) { return api.OpenAPIFor(withThumbnails) }, withThumbnails},
		"mailer":          {func() ([]byte, error) { return api.OpenAPIFor(mailer) }, mailer},
	}
	for name, tt := range docs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			doc, err := tt.doc()
			require.NoError(t, err)
			create, _ := readDoc(t, doc)
			require.Equal(t, tt.registry.KindNames(), create.Properties.Kind.Enum)
			var kinds []string
			for _, raw := range create.Properties.Args.OneOf {
				var schema argsSchemaFields
				require.NoError(t, json.Unmarshal(raw, &schema))
				kinds = append(kinds, schema.Kind)
				_, kind, ok := tt.registry.ForKind(schema.Kind)
				require.True(t, ok, "x-kind %q is not a registered kind", schema.Kind)
				serverSets := kind.ArgsType().Implements(reflect.TypeFor[producer.TierFields]())
				var want []string
				for _, f := range kind.ArgsFields() {
					if !serverSets || (f != "tier" && f != "user_id") {
						want = append(want, f)
					}
				}
				require.ElementsMatch(t, want, slices.Collect(maps.Keys(schema.Properties)), "args of %s", schema.Kind)
			}
			require.Equal(t, tt.registry.KindNames(), kinds, "one args schema per kind, in order")
		})
	}
}

// update rewrites docs/openapi.json with the reference app's document:
// go test ./api -run TestOpenAPIDocs -update.
var update = flag.Bool("update", false, "rewrite docs/openapi.json (TestOpenAPIDocs)")

// TestOpenAPIDocs: docs/openapi.json is, byte for byte, the document the
// reference app's API (cmd/api) serves, OpenAPIFor(jobs.Registry); -update
// writes it.
func TestOpenAPIDocs(t *testing.T) {
	t.Parallel()
	registry := testdb.Registry(t)
	doc, err := api.OpenAPIFor(registry)
	require.NoError(t, err)
	require.Equal(t, string(doc), string(served(t, registry)))
	const path = "../docs/openapi.json"
	if *update {
		require.NoError(t, os.WriteFile(path, doc, 0o644))
	}
	inDocs, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, string(doc), string(inDocs),
		"docs/openapi.json is not the reference app's document: go test ./api -run TestOpenAPIDocs -update")
}

// TestOpenAPIOfTheReferenceApp: the reference app's document is the core
// document with the reference kinds in CreateJob, whose args schemas are
// the args types' hand-written ones (jobs.AnalysisArgs.OpenAPISchema,
// jobs.SpecViewArgs.OpenAPISchema), as written, tagged x-kind first.
func TestOpenAPIOfTheReferenceApp(t *testing.T) {
	t.Parallel()
	var (
		_ api.JobArgsWithOpenAPISchema = jobs.AnalysisArgs{}
		_ api.JobArgsWithOpenAPISchema = jobs.SpecViewArgs{}
	)
	doc, err := api.OpenAPIFor(testdb.Registry(t))
	require.NoError(t, err)
	create, rest := readDoc(t, doc)
	_, coreRest := readDoc(t, api.OpenAPI())
	require.Equal(t, coreRest, rest, "everything but CreateJob is the core document")
	require.Equal(t, []string{jobs.KindAnalysis, jobs.KindSpecView}, create.Properties.Kind.Enum)
	require.Len(t, create.Properties.Args.OneOf, 2)
	for i, hand := range []json.RawMessage{jobs.AnalysisArgs{}.OpenAPISchema(), jobs.SpecViewArgs{}.OpenAPISchema()} {
		var tagged map[string]any
		require.NoError(t, json.Unmarshal(hand, &tagged))
		tagged["x-kind"] = create.Properties.Kind.Enum[i]
		want, err := json.Marshal(tagged)
		require.NoError(t, err)
		require.JSONEq(t, string(want), string(create.Properties.Args.OneOf[i]))
		require.True(t, strings.HasPrefix(compact(t, create.Properties.Args.OneOf[i]), `{"x-kind":`))
	}
	require.Contains(t, string(create.Properties.Args.OneOf[0]), `"description": "Clean absolute directory path on the workers`)
	require.Contains(t, string(create.Properties.Args.OneOf[1]), `"minimum": 1`)
}

// TestOpenAPICoreNamesNoReferenceKind: the core document is service
// agnostic: no kind, service or queue of the reference app appears in it
// (issue 16); CreateJob's kind enum and args.oneOf are OpenAPIFor's.
func TestOpenAPICoreNamesNoReferenceKind(t *testing.T) {
	t.Parallel()
	reference := testdb.Registry(t)
	names := slices.Concat(reference.KindNames(), reference.Names(), reference.Queues())
	for _, name := range names {
		require.NotRegexp(t, `(?i)`+regexp.QuoteMeta(name), string(api.OpenAPI()))
	}
	create, _ := readDoc(t, api.OpenAPI())
	require.Empty(t, create.Properties.Kind.Enum)
	require.Empty(t, create.Properties.Args.OneOf)
}

// compact is raw without insignificant spaces.
func compact(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, json.Compact(&buf, raw))
	return buf.String()
}

// TestOpenAPIDescribesTheThumbnailKind: a server of the reference app's
// registry joined with the thumbnail example's serves the reference app's
// document but for CreateJob, whose kinds are the three and whose args
// schemas are the reference kinds' hand-written ones and the thumbnail
// kind's generated one.
func TestOpenAPIDescribesTheThumbnailKind(t *testing.T) {
	t.Parallel()
	registry, err := thumbnail.WithReference(jobs.Deps{})
	require.NoError(t, err)
	doc := served(t, registry)
	again, err := api.OpenAPIFor(registry)
	require.NoError(t, err)
	require.Equal(t, string(doc), string(again), "the same registry, the same bytes")
	reference, err := api.OpenAPIFor(testdb.Registry(t))
	require.NoError(t, err)

	create, rest := readDoc(t, doc)
	refCreate, refRest := readDoc(t, reference)
	require.Equal(t, refRest, rest, "everything but CreateJob is the reference app's document")
	require.Equal(t, []string{"analysis", "specview", "thumbnail"}, create.Properties.Kind.Enum)
	oneOf := create.Properties.Args.OneOf
	require.Len(t, oneOf, 3)
	require.JSONEq(t, string(refCreate.Properties.Args.OneOf[0]), string(oneOf[0]))
	require.JSONEq(t, string(refCreate.Properties.Args.OneOf[1]), string(oneOf[1]))
	require.JSONEq(t, `{
		"x-kind": "thumbnail",
		"description": "Generated from the Go type thumbnail.Args. Required fields and limits on values are not described: the kind checks them (its Validate), and a 400 says what it refused.",
		"type": "object",
		"additionalProperties": false,
		"properties": {
			"image": {"type": "string"},
			"width": {"type": "integer", "format": "int64"}
		}
	}`, string(oneOf[2]))

	// The rest of CreateJob is the core document's.
	var got, want map[string]any
	require.NoError(t, json.Unmarshal(doc, &got))
	require.NoError(t, json.Unmarshal(api.OpenAPI(), &want))
	createOf := func(doc map[string]any) map[string]any {
		create := doc["components"].(map[string]any)["schemas"].(map[string]any)["CreateJob"].(map[string]any)
		props := create["properties"].(map[string]any)
		delete(props["kind"].(map[string]any), "enum")
		delete(props["args"].(map[string]any), "oneOf")
		return create
	}
	require.Equal(t, createOf(want), createOf(got))
}

// TestOpenAPILeavesOutUnregisteredKinds: a server of the thumbnail service
// alone describes its kind only; one whose kind "analysis" has other args
// than the reference app's gets their generated schema, not the reference
// args' hand-written one.
func TestOpenAPILeavesOutUnregisteredKinds(t *testing.T) {
	t.Parallel()
	alone, err := thumbnail.Registry(thumbnail.Deps{})
	require.NoError(t, err)
	create, _ := readDoc(t, served(t, alone))
	require.Equal(t, []string{"thumbnail"}, create.Properties.Kind.Enum)
	require.Len(t, create.Properties.Args.OneOf, 1)
	var only argsSchemaFields
	require.NoError(t, json.Unmarshal(create.Properties.Args.OneOf[0], &only))
	require.Equal(t, "thumbnail", only.Kind)

	create, _ = readDoc(t, served(t, registryOf(t, service.WorkerKind(&otherAnalysisWorker{}))))
	require.Equal(t, []string{"analysis"}, create.Properties.Kind.Enum)
	require.JSONEq(t, `{
		"x-kind": "analysis",
		"description": "Generated from the Go type api_test.otherAnalysisArgs. Required fields and limits on values are not described: the kind checks them (its Validate), and a 400 says what it refused.",
		"type": "object",
		"additionalProperties": false,
		"properties": {"target": {"type": "integer", "format": "int64"}}
	}`, string(create.Properties.Args.OneOf[0]))
}

// TestOpenAPIWithoutKinds: no registry, or one without kinds, has no
// document; a server without a registry answers /openapi.json with a 500.
func TestOpenAPIWithoutKinds(t *testing.T) {
	t.Parallel()
	_, err := api.OpenAPIFor(nil)
	require.EqualError(t, err, "openapi: no registry")
	empty, err := service.NewRegistry()
	require.NoError(t, err)
	_, err = api.OpenAPIFor(empty)
	require.EqualError(t, err, "openapi: the registry has no kinds")

	server := api.New(api.Config{}, nil, nil, api.NewMetrics(nil, nil, nil))
	rec := httptest.NewRecorder()
	server.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/openapi.json", nil))
	require.Equal(t, http.StatusInternalServerError, rec.Code)
	require.JSONEq(t, `{"error": "openapi: no registry"}`, rec.Body.String())
}

// everyTypeArgs have a field of each JSON type, and the field shapes
// encoding/json and service.Kind.ArgsFields know.
type everyTypeArgs struct {
	embeddedArgs // its fields inline

	Name     string            `json:"name"`
	Count    int64             `json:"count,omitempty"`
	Small    int8              `json:"small"`
	Port     uint16            `json:"port"`
	Seq      uint64            `json:"seq"`
	Ratio    float64           `json:"ratio"`
	Share    float32           `json:"share"`
	Enabled  bool              `json:"enabled"`
	Tags     []string          `json:"tags"`
	Pair     [2]int32          `json:"pair"`
	Limits   map[string]int    `json:"limits"`
	Labels   map[string]string `json:"labels"`
	Owner    owner             `json:"owner"`
	Note     *string           `json:"note"`
	At       time.Time         `json:"at"`
	Blob     []byte            `json:"blob"`
	Extra    any               `json:"extra"`
	Raw      json.RawMessage   `json:"raw"`
	Tier     tiers.Tier        `json:"tier"`
	Timeout  time.Duration     `json:"timeout"`
	ID       int64             `json:"id,string"`
	UserID   string            `json:"user_id"` // not producer.TierFields: the client's
	Untagged string
	Skipped  string   `json:"-"`
	Notify   chan int `json:"notify"` // nothing but null decodes: left out
}

type embeddedArgs struct {
	Team string `json:"team"`
}

// owner is recursive: its manager is an owner.
type owner struct {
	Email   string `json:"email"`
	Manager *owner `json:"manager"`
}

func (everyTypeArgs) Kind() string { return "every_type" }

type everyTypeWorker struct {
	river.WorkerDefaults[everyTypeArgs]
}

func (*everyTypeWorker) Work(context.Context, *river.Job[everyTypeArgs]) error { return nil }

// tieredArgs keep the tier and the tenant in fields of their own, which the
// server sets.
type tieredArgs struct {
	Target string `json:"target"`
	UserID string `json:"user_id"`
	Tier   string `json:"tier"`
}

func (tieredArgs) Kind() string { return "tiered" }

func (a tieredArgs) WithTier(tier tiers.Tier, tenant string) river.JobArgs {
	a.Tier, a.UserID = tier.String(), tenant
	return a
}

type tieredWorker struct {
	river.WorkerDefaults[tieredArgs]
}

func (*tieredWorker) Work(context.Context, *river.Job[tieredArgs]) error { return nil }

// otherAnalysisArgs are a team's kind "analysis", not the reference app's.
type otherAnalysisArgs struct {
	Target int64 `json:"target"`
}

func (otherAnalysisArgs) Kind() string { return "analysis" }

type otherAnalysisWorker struct {
	river.WorkerDefaults[otherAnalysisArgs]
}

func (*otherAnalysisWorker) Work(context.Context, *river.Job[otherAnalysisArgs]) error { return nil }

// registryOf is a registry of one service, "testsvc", of kinds.
func registryOf(t *testing.T, kinds ...service.Kind) *service.Registry {
	t.Helper()
	svc, err := service.New(&service.Config{Name: "testsvc", Kinds: kinds})
	require.NoError(t, err)
	registry, err := service.NewRegistry(svc)
	require.NoError(t, err)
	return registry
}

// TestOpenAPIArgsSchemaOfEveryJSONType states the generated schema of args
// with a field of each JSON type, and checks that args the schema
// describes decode (service.Kind.DecodeArgs) and that values of another
// type do not.
func TestOpenAPIArgsSchemaOfEveryJSONType(t *testing.T) {
	t.Parallel()
	everyType := service.WorkerKind(&everyTypeWorker{})
	registry := registryOf(t, everyType, service.WorkerKind(&tieredWorker{}))
	create, _ := readDoc(t, served(t, registry))
	require.Equal(t, []string{"every_type", "tiered"}, create.Properties.Kind.Enum)
	require.Len(t, create.Properties.Args.OneOf, 2)
	require.JSONEq(t, `{
		"x-kind": "every_type",
		"description": "Generated from the Go type api_test.everyTypeArgs. Required fields and limits on values are not described: the kind checks them (its Validate), and a 400 says what it refused.",
		"type": "object",
		"additionalProperties": false,
		"properties": {
			"team": {"type": "string"},
			"name": {"type": "string"},
			"count": {"type": "integer", "format": "int64"},
			"small": {"type": "integer", "minimum": -128, "maximum": 127},
			"port": {"type": "integer", "minimum": 0, "maximum": 65535},
			"seq": {"type": "integer", "minimum": 0},
			"ratio": {"type": "number", "format": "double"},
			"share": {"type": "number", "format": "float"},
			"enabled": {"type": "boolean"},
			"tags": {"type": "array", "items": {"type": "string"}},
			"pair": {"type": "array", "items": {"type": "integer", "format": "int32"}},
			"limits": {"type": "object", "additionalProperties": {"type": "integer", "format": "int64"}},
			"labels": {"type": "object", "additionalProperties": {"type": "string"}},
			"owner": {"type": "object", "properties": {
				"email": {"type": "string"},
				"manager": {"type": "object", "nullable": true}
			}},
			"note": {"type": "string", "nullable": true},
			"at": {"type": "string", "format": "date-time"},
			"blob": {"type": "string", "format": "byte"},
			"extra": {},
			"raw": {},
			"tier": {"type": "string"},
			"timeout": {"type": "integer", "format": "int64"},
			"id": {"type": "string"},
			"user_id": {"type": "string"},
			"Untagged": {"type": "string"}
		}
	}`, string(create.Properties.Args.OneOf[0]))
	require.JSONEq(t, `{
		"x-kind": "tiered",
		"description": "Generated from the Go type api_test.tieredArgs. Required fields and limits on values are not described: the kind checks them (its Validate), and a 400 says what it refused.",
		"type": "object",
		"additionalProperties": false,
		"properties": {"target": {"type": "string"}}
	}`, string(create.Properties.Args.OneOf[1]))

	// Every property of the schema, as the schema says, decodes.
	args, err := everyType.DecodeArgs([]byte(`{
		"team": "payments", "name": "n", "count": 3, "small": -128, "port": 65535, "seq": 18446744073709551615,
		"ratio": 0.5, "share": 1.5, "enabled": true, "tags": ["a"], "pair": [1, 2],
		"limits": {"a": 1}, "labels": {"a": "b"}, "owner": {"email": "e", "manager": {"email": "m"}},
		"note": null, "at": "2026-01-02T03:04:05Z", "blob": "aGk=", "extra": [1, "x"], "raw": {"any": 1},
		"tier": "pro", "timeout": 1000000000, "id": "42", "user_id": "u_1", "Untagged": "x"
	}`))
	require.NoError(t, err)
	decoded := args.(everyTypeArgs)
	require.Equal(t, "payments", decoded.Team)
	require.Equal(t, owner{Email: "e", Manager: &owner{Email: "m"}}, decoded.Owner)
	require.Equal(t, []byte("hi"), decoded.Blob)
	require.Equal(t, tiers.Pro, decoded.Tier)
	require.Equal(t, int64(42), decoded.ID)
	require.Equal(t, time.Second, decoded.Timeout)

	// What the schema refuses, decoding refuses: other types, bounds of
	// the sized integers, keys it does not list.
	for _, give := range []string{
		`{"name": 1}`, `{"count": "3"}`, `{"count": 1.5}`, `{"small": 128}`, `{"port": -1}`, `{"seq": -1}`,
		`{"ratio": "x"}`, `{"enabled": "true"}`, `{"tags": "a"}`, `{"tags": [1]}`, `{"pair": {}}`,
		`{"limits": {"a": "b"}}`, `{"owner": "o"}`, `{"note": 1}`, `{"at": "today"}`, `{"blob": 1}`,
		`{"tier": "gold"}`, `{"timeout": "1s"}`, `{"id": 42}`, `{"Skipped": "x"}`, `{"notify": 1}`, `{"untagged": "x"}`,
	} {
		_, err := everyType.DecodeArgs([]byte(give))
		require.Error(t, err, give)
	}
}

// reportArgs describe themselves with a hand-written schema (a value
// receiver); the server sets their tier.
type reportArgs struct {
	Account string     `json:"account"`
	Days    int32      `json:"days,omitempty"`
	Format  *string    `json:"format"`
	Since   time.Time  `json:"since"`
	Extra   any        `json:"extra"`
	Tier    tiers.Tier `json:"tier"`
}

func (reportArgs) Kind() string { return "report" }

func (a reportArgs) WithTier(tier tiers.Tier, _ string) river.JobArgs {
	a.Tier = tier
	return a
}

// reportSchema is reportArgs' schema: its keys in an order of its own, a
// property of any type for extra, no tier (the server's), no x-kind.
const reportSchema = `{
  "description": "A report of an account's <last> days & more.",
  "type": "object",
  "required": ["account"],
  "additionalProperties": false,
  "properties": {
    "since": {"type": "string", "format": "date-time", "example": "2026-01-02T03:04:05Z"},
    "account": {"type": "string", "minLength": 1, "description": "The account's id."},
    "days": {"type": "integer", "format": "int32", "minimum": 1, "maximum": 365, "default": 30},
    "format": {"type": "string", "enum": ["pdf", "csv"], "nullable": true},
    "extra": {"description": "Anything."}
  }
}`

func (reportArgs) OpenAPISchema() json.RawMessage { return json.RawMessage(reportSchema) }

type reportWorker struct {
	river.WorkerDefaults[reportArgs]
}

func (*reportWorker) Work(context.Context, *river.Job[reportArgs]) error { return nil }

// auditArgs describe themselves with a pointer receiver, and give their
// x-kind.
type auditArgs struct {
	Entry int64 `json:"entry"`
}

func (auditArgs) Kind() string { return "audit" }

func (*auditArgs) OpenAPISchema() json.RawMessage {
	return json.RawMessage(`{"x-kind": "audit", "type": "object", "additionalProperties": false, "properties": {"entry": {"type": "integer", "minimum": 1}}}`)
}

type auditWorker struct {
	river.WorkerDefaults[auditArgs]
}

func (*auditWorker) Work(context.Context, *river.Job[auditArgs]) error { return nil }

// TestOpenAPIHandWrittenSchema: a kind whose args implement
// api.JobArgsWithOpenAPISchema (by value or by pointer) has its schema in
// the document as written, keys in its order, x-kind first; the other
// kinds have their generated ones.
func TestOpenAPIHandWrittenSchema(t *testing.T) {
	t.Parallel()
	registry := registryOf(t, service.WorkerKind(&reportWorker{}), service.WorkerKind(&auditWorker{}), service.WorkerKind(&tieredWorker{}))
	doc := served(t, registry)
	create, _ := readDoc(t, doc)
	require.Equal(t, []string{"report", "audit", "tiered"}, create.Properties.Kind.Enum)
	require.Len(t, create.Properties.Args.OneOf, 3)
	require.Equal(t, `{"x-kind":"report",`+strings.TrimPrefix(compact(t, json.RawMessage(reportSchema)), "{"),
		compact(t, create.Properties.Args.OneOf[0]), "as written, x-kind first")
	require.Contains(t, string(doc), `"description": "A report of an account's <last> days & more."`, "not HTML-escaped")
	require.Equal(t, `{"x-kind":"audit","type":"object","additionalProperties":false,"properties":{"entry":{"type":"integer","minimum":1}}}`,
		compact(t, create.Properties.Args.OneOf[1]))
	var tiered argsSchemaFields
	require.NoError(t, json.Unmarshal(create.Properties.Args.OneOf[2], &tiered))
	require.Equal(t, "tiered", tiered.Kind)
	require.Contains(t, string(create.Properties.Args.OneOf[2]), "Generated from the Go type api_test.tieredArgs")
}

// TestOpenAPIHandWrittenSchemaMustFit: a hand-written schema that does not
// describe its args type is OpenAPIFor's error, which names the kind, the
// type and everything wrong, so that it cannot drift from the args; a
// server of such a registry answers /openapi.json with a 500.
func TestOpenAPIHandWrittenSchemaMustFit(t *testing.T) {
	t.Parallel()
	report := service.WorkerKind(&reportWorker{})
	const prefix = "openapi: kind report: api_test.reportArgs.OpenAPISchema does not describe the args: "
	props := `"account": {"type": "string"}, "days": {"type": "integer"}, "format": {"type": "string"}, "since": {"type": "string"}, "extra": {}`
	for name, tt := range map[string]struct {
		schema, err string
	}{
		"fits": {
			schema: `{"type": "object", "additionalProperties": false, "required": ["account"], "properties": {` + props + `}}`,
		},
		"a property the args do not have": {
			schema: `{"type": "object", "additionalProperties": false, "properties": {` + props + `, "acount": {"type": "string"}}}`,
			err:    prefix + `property "acount" is not a JSON field of the args`,
		},
		"a field it misses": {
			schema: `{"type": "object", "additionalProperties": false, "properties": {"account": {"type": "string"}, "days": {"type": "integer"}, "extra": {}}}`,
			err:    prefix + `no property "format" (a JSON field of the args); no property "since" (a JSON field of the args)`,
		},
		"another type": {
			schema: `{"type": "object", "additionalProperties": false, "properties": {"account": {"type": "integer"}, "days": {"type": "number"}, "format": {}, "since": {"type": "string"}, "extra": {"type": "object"}}}`,
			err: prefix + `property "account" is of type "integer", the field's JSON type is "string"; ` +
				`property "days" is of type "number", the field's JSON type is "integer"; ` +
				`property "format" is of type "", the field's JSON type is "string"`,
		},
		"a field the server sets": {
			schema: `{"type": "object", "additionalProperties": false, "properties": {` + props + `, "tier": {"type": "string"}}}`,
			err:    prefix + `property "tier" is set by the server (producer.TierFields), not sent by the client`,
		},
		"required, not a property": {
			schema: `{"type": "object", "additionalProperties": false, "required": ["account", "acount"], "properties": {` + props + `}}`,
			err:    prefix + `required "acount" is not a property`,
		},
		"other keys allowed": {
			schema: `{"type": "object", "properties": {` + props + `}}`,
			err:    prefix + `additionalProperties is not false (the API refuses a key the args type does not have)`,
		},
		"not an object schema": {
			schema: `{"additionalProperties": false, "properties": {` + props + `}}`,
			err:    prefix + `type is "", not "object" (args are a JSON object)`,
		},
		"another kind's": {
			schema: `{"x-kind": "audit", "type": "object", "additionalProperties": false, "properties": {` + props + `}}`,
			err:    prefix + `x-kind is "audit", not the kind's name`,
		},
		"properties not an object": {
			schema: `{"type": "object", "additionalProperties": false, "properties": []}`,
			err:    prefix + `json: cannot unmarshal array into Go struct field .properties of type map[string]json.RawMessage`,
		},
		"not JSON": {
			schema: `{"type": "object",}`,
			err:    "openapi: kind report: api_test.reportArgs.OpenAPISchema is not a JSON object: invalid character '}' looking for beginning of object key string",
		},
		"not an object": {
			schema: `["account"]`,
			err:    "openapi: kind report: api_test.reportArgs.OpenAPISchema is not a JSON object: not a JSON object",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := api.HandSchema(report, json.RawMessage(tt.schema))
			if tt.err == "" {
				require.NoError(t, err)
				require.True(t, strings.HasPrefix(compact(t, got), `{"x-kind":"report",`))
				return
			}
			require.EqualError(t, err, tt.err)
		})
	}

	// Through OpenAPIFor and a server: every kind that does not fit is
	// named.
	registry := registryOf(t, service.WorkerKind(&driftedWorker{}), service.WorkerKind(&tieredWorker{}), service.WorkerKind(&otherDriftedWorker{}))
	_, err := api.OpenAPIFor(registry)
	const want = `openapi: kind drifted: api_test.driftedArgs.OpenAPISchema does not describe the args: property "target" is not a JSON field of the args; no property "targets" (a JSON field of the args)` + "\n" +
		`openapi: kind other_drifted: api_test.otherDriftedArgs.OpenAPISchema is not a JSON object: unexpected end of JSON input`
	require.EqualError(t, err, want)
	server := api.New(api.Config{Registry: registry}, nil, nil, api.NewMetrics(nil, registry, nil))
	rec := httptest.NewRecorder()
	server.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/openapi.json", nil))
	require.Equal(t, http.StatusInternalServerError, rec.Code)
	var body struct {
		Error string `json:"error"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
	require.Equal(t, want, body.Error)
}

// driftedArgs' field was renamed; their schema was not.
type driftedArgs struct {
	Targets []string `json:"targets"`
}

func (driftedArgs) Kind() string { return "drifted" }

func (driftedArgs) OpenAPISchema() json.RawMessage {
	return json.RawMessage(`{"type": "object", "additionalProperties": false, "properties": {"target": {"type": "string"}}}`)
}

type driftedWorker struct {
	river.WorkerDefaults[driftedArgs]
}

func (*driftedWorker) Work(context.Context, *river.Job[driftedArgs]) error { return nil }

// otherDriftedArgs have no schema at all.
type otherDriftedArgs struct{}

func (otherDriftedArgs) Kind() string { return "other_drifted" }

func (otherDriftedArgs) OpenAPISchema() json.RawMessage { return nil }

type otherDriftedWorker struct {
	river.WorkerDefaults[otherDriftedArgs]
}

func (*otherDriftedWorker) Work(context.Context, *river.Job[otherDriftedArgs]) error { return nil }
