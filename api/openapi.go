package api

import (
	"bytes"
	_ "embed"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/service"
)

//go:embed openapi.json
var openAPI []byte

// OpenAPI is the hand-written OpenAPI 3 document of the reference app's API
// (api/openapi.json, copied in docs/): every endpoint, and the reference
// app's kinds, analysis and specview, as the kinds of POST /v1/jobs. A
// Server serves OpenAPIFor its Config.Registry, which for the reference
// app's registry is this document.
func OpenAPI() []byte { return openAPI }

// OpenAPIFor is the OpenAPI 3 document of an API of registry's kinds, the
// one a Server serves at /openapi.json: OpenAPI with the kind enum of
// CreateJob (POST /v1/jobs's body) set to registry.KindNames(), and its
// args.oneOf one schema per kind, in that order, tagged with the kind's
// name in x-kind. A kind keeps OpenAPI's hand-written schema when there is
// one and it still has the args type's fields, of the same JSON types;
// every other kind gets a schema generated from its args type
// (service.Kind.ArgsType). A hand-written schema of a kind not in registry
// is left out.
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
// or has no kinds.
func OpenAPIFor(registry *service.Registry) ([]byte, error) {
	if registry == nil {
		return nil, errors.New("openapi: no registry")
	}
	names := registry.KindNames()
	if len(names) == 0 {
		return nil, errors.New("openapi: the registry has no kinds")
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
			var handWritten []json.RawMessage
			if err := args.get("oneOf", &handWritten); err != nil {
				return err
			}
			byKind := map[string]json.RawMessage{}
			for _, s := range handWritten {
				var tag struct {
					Kind string `json:"x-kind"`
				}
				if err := json.Unmarshal(s, &tag); err != nil {
					return fmt.Errorf("CreateJob args.oneOf: %w", err)
				}
				byKind[tag.Kind] = s
			}
			oneOf := make([]any, 0, len(names))
			for _, name := range names {
				_, kind, _ := registry.ForKind(name)
				generated := argsSchema(kind)
				if s, ok := byKind[name]; ok && fits(s, generated) {
					oneOf = append(oneOf, s)
				} else {
					oneOf = append(oneOf, generated)
				}
			}
			return args.set("oneOf", oneOf)
		})
	})
	if err != nil {
		return nil, fmt.Errorf("openapi.json: %w", err)
	}
	compact, err := marshal(&doc)
	if err != nil {
		return nil, err
	}
	// Indented as openapi.json is, so that the reference app's document is
	// served as written.
	var out bytes.Buffer
	if err := json.Indent(&out, compact, "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// fits reports whether the hand-written args schema s describes the fields
// of generated, with the same JSON types.
func fits(s json.RawMessage, generated *schema) bool {
	var hand struct {
		Properties map[string]struct {
			Type string `json:"type"`
		} `json:"properties"`
	}
	if json.Unmarshal(s, &hand) != nil || len(hand.Properties) != len(generated.Properties) {
		return false
	}
	for _, p := range generated.Properties {
		h, ok := hand.Properties[p.name]
		if !ok || (p.schema.Type != "" && h.Type != p.schema.Type) {
			return false
		}
	}
	return true
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
