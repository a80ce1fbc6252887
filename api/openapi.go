package api

import (
	"bytes"
	_ "embed"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/riverqueue/river"

	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/service"
)

//go:embed openapi.json
var openAPI []byte

// OpenAPI is the core of the API's OpenAPI 3 document (api/openapi.json):
// every endpoint and every schema, but no kinds. CreateJob, the body of
// POST /v1/jobs, leaves its kind a string and its args undescribed:
// OpenAPIFor fills them in with a registry's kinds, and that is the
// document a Server serves (docs/openapi.json is the one of the reference
// app's registry).
func OpenAPI() []byte { return openAPI }

// JobArgsWithOpenAPISchema is implemented by args types that describe
// themselves in the API's OpenAPI document with a hand-written JSON schema
// (OpenAPI 3.0's schema object: descriptions, examples, required fields,
// limits on values) instead of the schema OpenAPIFor generates from their
// fields. OpenAPIFor calls OpenAPISchema on a zero value of the kind's args
// type (service.Kind.ArgsType; a value or a pointer receiver) and puts the
// schema as written in CreateJob's args.oneOf, tagged with the kind's name
// in x-kind.
//
// The schema must still describe the args type, or OpenAPIFor fails: an
// object ("type": "object"; for a struct, "additionalProperties": false,
// as the API refuses any other key) with a property for each JSON field of
// the type (but tier and user_id of args that implement
// producer.TierFields, which the server sets), none other, each of the
// field's JSON type (the "type" of the field in the generated schema; a
// field it gives none, an interface or a type with its own UnmarshalJSON,
// may have any), and only properties among its required fields. It may
// leave out x-kind, or give the kind's name. A test of the team's registry
// that calls OpenAPIFor keeps the schema in step with the args.
type JobArgsWithOpenAPISchema interface {
	river.JobArgs

	// OpenAPISchema is the JSON schema of the args as a client sends them
	// to POST /v1/jobs.
	OpenAPISchema() json.RawMessage
}

// OpenAPIFor is the OpenAPI 3 document of an API of registry's kinds, the
// one a Server serves at /openapi.json: OpenAPI with the kind enum of
// CreateJob (POST /v1/jobs's body) set to registry.KindNames(), and its
// args.oneOf one schema per kind, in that order, tagged with the kind's
// name in x-kind. A kind whose args type implements
// JobArgsWithOpenAPISchema has its hand-written schema, as written; every
// other kind gets a schema generated from its args type
// (service.Kind.ArgsType).
//
// A generated schema is an object with a property per JSON field of the
// args type (its json tag's name, else its Go name; an embedded struct's
// fields inline), of the field's JSON type: string, integer (with its
// format, int32 or int64, or its bounds), number, boolean, array (with
// items), object (a struct's fields as properties, a map's values as
// additionalProperties), string for time.Time (date-time), []byte (byte)
// and types that decode from text, any value for an interface and for a
// type that decodes itself (UnmarshalJSON); a pointer is nullable. Its
// additionalProperties is false, as service.Kind.DecodeArgs refuses any
// other key. It lists no required fields and no limits on values: those
// are the kind's checks (the args' Validate, service.Check), as its
// description says. The fields tier and user_id of args that implement
// producer.TierFields are left out: the server sets them.
//
// The same registry gives the same bytes. An error means registry is nil
// or has no kinds, or that a hand-written schema does not describe its
// args type (JobArgsWithOpenAPISchema says what it must describe; the
// error names every kind that fails, and what is wrong): a test of the
// team's registry that calls OpenAPIFor keeps the schemas in step with the
// args, and Run refuses to start with such a registry.
func OpenAPIFor(registry *service.Registry) ([]byte, error) {
	if registry == nil {
		return nil, errors.New("openapi: no registry")
	}
	names := registry.KindNames()
	if len(names) == 0 {
		return nil, errors.New("openapi: the registry has no kinds")
	}
	oneOf := make([]json.RawMessage, 0, len(names))
	var wrong []error
	for _, name := range names {
		_, kind, _ := registry.ForKind(name)
		s, err := kindSchema(kind)
		if err != nil {
			wrong = append(wrong, err)
			continue
		}
		oneOf = append(oneOf, s)
	}
	if err := errors.Join(wrong...); err != nil {
		return nil, err
	}

	var doc rawObject
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		return nil, fmt.Errorf("openapi.json: %w", err)
	}
	err := doc.edit([]string{"components", "schemas", "CreateJob", "properties"}, func(props *rawObject) error {
		if err := props.edit([]string{"kind"}, func(kind *rawObject) error {
			return kind.set("enum", names)
		}); err != nil {
			return err
		}
		return props.edit([]string{"args"}, func(args *rawObject) error {
			return args.setFirst("oneOf", oneOf)
		})
	})
	if err != nil {
		return nil, fmt.Errorf("openapi.json: %w", err)
	}
	compact, err := marshal(&doc)
	if err != nil {
		return nil, err
	}
	// Indented as openapi.json is, so that what the core document and the
	// hand-written schemas say is served as written.
	var out bytes.Buffer
	if err := json.Indent(&out, compact, "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// kindSchema is the schema of kind's args in CreateJob's args.oneOf: the
// hand-written one of its args type (JobArgsWithOpenAPISchema), else the
// generated one.
func kindSchema(kind service.Kind) (json.RawMessage, error) {
	if t := argsBase(kind); t != nil {
		if self, ok := reflect.New(t).Interface().(JobArgsWithOpenAPISchema); ok {
			return handSchema(kind, self.OpenAPISchema())
		}
	}
	return marshal(argsSchema(kind))
}

// argsBase is kind's args type without its pointers, or nil.
func argsBase(kind service.Kind) reflect.Type {
	t := kind.ArgsType()
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// handSchema is hand, the hand-written schema of kind's args, tagged
// x-kind (first), once checked against the schema generated from the args
// type.
func handSchema(kind service.Kind, hand json.RawMessage) (json.RawMessage, error) {
	t := argsBase(kind)
	var s rawObject
	if err := json.Unmarshal(hand, &s); err != nil {
		return nil, fmt.Errorf("openapi: kind %s: %v.OpenAPISchema is not a JSON object: %w", kind.Name(), t, err)
	}
	if problems := checkSchema(kind.Name(), t, hand, argsSchema(kind)); len(problems) > 0 {
		return nil, fmt.Errorf("openapi: kind %s: %v.OpenAPISchema does not describe the args: %s",
			kind.Name(), t, strings.Join(problems, "; "))
	}
	if err := s.setFirst("x-kind", kind.Name()); err != nil {
		return nil, err
	}
	return marshal(&s)
}

// checkSchema lists what hand, the hand-written schema (a JSON object) of
// kind name's args type t, says that does not fit the args: what
// generated, the schema generated from t, describes.
func checkSchema(name string, t reflect.Type, hand json.RawMessage, generated *schema) []string {
	var s struct {
		Kind                 *string                    `json:"x-kind"`
		Type                 string                     `json:"type"`
		AdditionalProperties json.RawMessage            `json:"additionalProperties"`
		Required             []string                   `json:"required"`
		Properties           map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(hand, &s); err != nil {
		return []string{err.Error()}
	}
	var problems []string
	if s.Kind != nil && *s.Kind != name {
		problems = append(problems, fmt.Sprintf("x-kind is %q, not the kind's name", *s.Kind))
	}
	if s.Type != "object" {
		problems = append(problems, fmt.Sprintf(`type is %q, not "object" (args are a JSON object)`, s.Type))
	}
	if t != nil && t.Kind() == reflect.Struct {
		if string(bytes.TrimSpace(s.AdditionalProperties)) != "false" {
			problems = append(problems, "additionalProperties is not false (the API refuses a key the args type does not have)")
		}
		fields := map[string]*schema{}
		for _, p := range generated.Properties {
			fields[p.name] = p.schema
		}
		serverSets := implements(t, tierFieldsType)
		for _, p := range slices.Sorted(maps.Keys(s.Properties)) {
			if _, ok := fields[p]; ok {
				continue
			}
			if serverSets && tierFields[p] {
				problems = append(problems, fmt.Sprintf("property %q is set by the server (producer.TierFields), not sent by the client", p))
			} else {
				problems = append(problems, fmt.Sprintf("property %q is not a JSON field of the args", p))
			}
		}
		for _, p := range generated.Properties {
			raw, ok := s.Properties[p.name]
			if !ok {
				problems = append(problems, fmt.Sprintf("no property %q (a JSON field of the args)", p.name))
				continue
			}
			var prop struct {
				Type string `json:"type"`
			}
			if err := json.Unmarshal(raw, &prop); err != nil {
				problems = append(problems, fmt.Sprintf("property %q: %v", p.name, err))
			} else if p.schema.Type != "" && prop.Type != p.schema.Type {
				problems = append(problems, fmt.Sprintf("property %q is of type %q, the field's JSON type is %q", p.name, prop.Type, p.schema.Type))
			}
		}
	}
	for _, r := range s.Required {
		if _, ok := s.Properties[r]; !ok {
			problems = append(problems, fmt.Sprintf("required %q is not a property", r))
		}
	}
	return problems
}

// schema is a generated OpenAPI 3.0 schema object; its fields are in the
// order they are written.
type schema struct {
	Kind                 string      `json:"x-kind,omitempty"`
	Description          string      `json:"description,omitempty"`
	Type                 string      `json:"type,omitempty"`
	Format               string      `json:"format,omitempty"`
	Nullable             bool        `json:"nullable,omitempty"`
	Minimum              json.Number `json:"minimum,omitempty"`
	Maximum              json.Number `json:"maximum,omitempty"`
	Items                *schema     `json:"items,omitempty"`
	AdditionalProperties any         `json:"additionalProperties,omitempty"` // false or a *schema
	Properties           properties  `json:"properties,omitempty"`
}

// properties are an object schema's properties, in the order of the Go
// type's fields.
type properties []property

type property struct {
	name   string
	schema *schema
}

func (ps properties) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, p := range ps {
		if i > 0 {
			buf.WriteByte(',')
		}
		name, err := marshal(p.name)
		if err != nil {
			return nil, err
		}
		value, err := marshal(p.schema)
		if err != nil {
			return nil, err
		}
		buf.Write(name)
		buf.WriteByte(':')
		buf.Write(value)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// tierFields are the args fields that producer.Insert fills in with the
// job's tier and tenant for args implementing producer.TierFields (the
// reference app's names): not the client's, so not in a generated schema.
var tierFields = map[string]bool{"tier": true, "user_id": true}

var (
	tierFieldsType       = reflect.TypeFor[producer.TierFields]()
	jsonUnmarshalerType  = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType  = reflect.TypeFor[encoding.TextUnmarshaler]()
	timeType             = reflect.TypeFor[time.Time]()
	jsonNumberType       = reflect.TypeFor[json.Number]()
	generatedDescription = "Generated from the Go type %s. Required fields and limits on values are not described: the kind checks them (its Validate), and a 400 says what it refused."
)

// argsSchema is the schema generated for kind's args, tagged x-kind.
func argsSchema(kind service.Kind) *schema {
	s := &schema{Kind: kind.Name(), Type: "object"}
	t := kind.ArgsType()
	if t == nil {
		return s
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	s.Description = fmt.Sprintf(generatedDescription, t)
	if t.Kind() != reflect.Struct {
		// DecodeArgs takes any object's keys and leaves the values to the
		// type (a map's).
		if v := typeSchema(t, map[reflect.Type]bool{}); v != nil {
			s.AdditionalProperties = v.AdditionalProperties
		}
		return s
	}
	s.AdditionalProperties = false
	serverSets := implements(t, tierFieldsType)
	for _, p := range structProperties(t, map[reflect.Type]bool{t: true}) {
		if !(serverSets && tierFields[p.name]) {
			s.Properties = append(s.Properties, p)
		}
	}
	return s
}

// structProperties are the properties of struct type t's JSON fields, by
// the rules of service.Kind.ArgsFields: a json tag's name, else the Go
// name; an untagged embedded struct's fields inline; no field tagged "-",
// nor an unexported one. A field of a type encoding/json cannot decode into
// (a channel, a function, a complex number) is left out: only null would
// decode. seen are the struct types being described, so that a recursive
// type ends.
func structProperties(t reflect.Type, seen map[reflect.Type]bool) properties {
	var props properties
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-":
			continue
		case f.Anonymous && name == "":
			inner := f.Type
			if inner.Kind() == reflect.Pointer {
				inner = inner.Elem()
			}
			if inner.Kind() == reflect.Struct && !seen[inner] {
				seen[inner] = true
				props = append(props, structProperties(inner, seen)...)
				delete(seen, inner)
			}
			continue
		case !f.IsExported():
			continue
		case name == "":
			name = f.Name
		}
		s := typeSchema(f.Type, seen)
		if s == nil {
			continue
		}
		if quoted(f.Type, opts) {
			s = &schema{Type: "string", Nullable: s.Nullable}
		}
		props = append(props, property{name: name, schema: s})
	}
	return props
}

// quoted reports whether the field's value is a JSON string holding the
// value (encoding/json's ",string" option, for scalars only).
func quoted(t reflect.Type, opts string) bool {
	if !strings.Contains(","+opts+",", ",string,") {
		return false
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool, reflect.String, reflect.Float32, reflect.Float64,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return true
	}
	return false
}

// typeSchema is the schema of the JSON values encoding/json decodes into a
// value of type t, or nil when it decodes none but null.
func typeSchema(t reflect.Type, seen map[reflect.Type]bool) *schema {
	nullable := false
	for t.Kind() == reflect.Pointer {
		t, nullable = t.Elem(), true
	}
	s := valueSchema(t, seen)
	if s != nil && nullable && s.Type != "" {
		s.Nullable = true
	}
	return s
}

func valueSchema(t reflect.Type, seen map[reflect.Type]bool) *schema {
	switch {
	case t == timeType:
		return &schema{Type: "string", Format: "date-time"}
	case t == jsonNumberType:
		return &schema{Type: "number"}
	case implements(t, jsonUnmarshalerType):
		return &schema{} // its own decoding: any value, as far as the schema knows
	case implements(t, textUnmarshalerType):
		return &schema{Type: "string"}
	}
	switch t.Kind() {
	case reflect.Bool:
		return &schema{Type: "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return integerSchema(t)
	case reflect.Float32:
		return &schema{Type: "number", Format: "float"}
	case reflect.Float64:
		return &schema{Type: "number", Format: "double"}
	case reflect.String:
		return &schema{Type: "string"}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return &schema{Type: "string", Format: "byte"} // base64
		}
		return arraySchema(t, seen)
	case reflect.Array:
		return arraySchema(t, seen)
	case reflect.Map:
		values := typeSchema(t.Elem(), seen)
		if values == nil {
			return nil
		}
		return &schema{Type: "object", AdditionalProperties: values}
	case reflect.Struct:
		if seen[t] {
			return &schema{Type: "object"} // a recursive type, described once
		}
		seen[t] = true
		defer delete(seen, t)
		// Keys inside a nested object are not checked as the args' own
		// are (encoding/json ignores unknown ones): no additionalProperties.
		return &schema{Type: "object", Properties: structProperties(t, seen)}
	case reflect.Interface:
		return &schema{}
	}
	return nil
}

func arraySchema(t reflect.Type, seen map[reflect.Type]bool) *schema {
	items := typeSchema(t.Elem(), seen)
	if items == nil {
		return nil
	}
	return &schema{Type: "array", Items: items}
}

// integerSchema states the range encoding/json accepts for an integer of
// type t: its format when it is one of OpenAPI's (int32, int64), else its
// bounds.
func integerSchema(t reflect.Type) *schema {
	s := &schema{Type: "integer"}
	bits := t.Bits()
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if bits >= 32 {
			s.Format = "int" + strconv.Itoa(bits)
		} else {
			s.Minimum = json.Number(strconv.FormatInt(-1<<(bits-1), 10))
			s.Maximum = json.Number(strconv.FormatInt(1<<(bits-1)-1, 10))
		}
	default:
		s.Minimum = "0"
		if bits < 64 {
			s.Maximum = json.Number(strconv.FormatUint(1<<bits-1, 10))
		}
	}
	return s
}

// implements reports whether t or *t implements iface.
func implements(t, iface reflect.Type) bool {
	return t.Implements(iface) || reflect.PointerTo(t).Implements(iface)
}

// rawObject is a JSON object whose members keep their order and their
// bytes, so that what is not edited is served as written.
type rawObject struct {
	keys   []string
	values map[string]json.RawMessage
}

func (o *rawObject) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return errors.New("not a JSON object")
	}
	o.keys, o.values = nil, map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return err
		}
		if _, ok := o.values[key]; ok {
			return fmt.Errorf("key %q given twice", key)
		}
		o.keys = append(o.keys, key)
		o.values[key] = value
	}
	_, err := dec.Token() // '}'
	return err
}

func (o *rawObject) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			buf.WriteByte(',')
		}
		key, err := marshal(k)
		if err != nil {
			return nil, err
		}
		buf.Write(key)
		buf.WriteByte(':')
		buf.Write(o.values[k])
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// get decodes the member key into v.
func (o *rawObject) get(key string, v any) error {
	raw, ok := o.values[key]
	if !ok {
		return fmt.Errorf("no %q", key)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	return nil
}

// set replaces the member key with v, in its place.
func (o *rawObject) set(key string, v any) error {
	raw, err := marshal(v)
	if err != nil {
		return err
	}
	if _, ok := o.values[key]; !ok {
		o.keys = append(o.keys, key)
	}
	o.values[key] = raw
	return nil
}

// setFirst sets the member key to v, first in the object.
func (o *rawObject) setFirst(key string, v any) error {
	if err := o.set(key, v); err != nil {
		return err
	}
	o.keys = append([]string{key}, slices.DeleteFunc(o.keys, func(k string) bool { return k == key })...)
	return nil
}

// edit calls f with the object at path (keys of nested objects) and puts
// back what f made of it.
func (o *rawObject) edit(path []string, f func(*rawObject) error) error {
	if len(path) == 0 {
		return f(o)
	}
	var child rawObject
	if err := o.get(path[0], &child); err != nil {
		return err
	}
	if err := child.edit(path[1:], f); err != nil {
		return fmt.Errorf("%s: %w", path[0], err)
	}
	return o.set(path[0], &child)
}

// marshal is json.Marshal without escaping <, > and &, which the document's
// text has.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
