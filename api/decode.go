package api

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"
)

// readLimited reads r's body, at most MaxBodyBytes (413 beyond). It writes
// the 4xx itself and returns false when the body is unusable.
func readLimited(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, "body larger than %d bytes", MaxBodyBytes)
		} else {
			writeError(w, http.StatusBadRequest, "read body: %v", err)
		}
		return nil, false
	}
	return body, true
}

// decodeBody decodes a JSON request body into v strictly (readJSON), and
// refuses a string or key with a NUL or bytes that are not UTF-8
// (CheckText). It writes the 4xx itself and returns false when the body is
// unusable.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	body, ok := readJSON(w, r, v)
	if !ok {
		return false
	}
	if err := CheckText(body); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return false
	}
	return true
}

// readJSON reads a JSON request body and decodes it into v strictly: at most
// MaxBodyBytes (413 beyond), no unknown fields, exactly one JSON value. It
// writes the 4xx itself and returns the body, or false when it is unusable.
func readJSON(w http.ResponseWriter, r *http.Request, v any) ([]byte, bool) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if media, _, err := mime.ParseMediaType(ct); err != nil || media != "application/json" {
			writeError(w, http.StatusUnsupportedMediaType, "content type must be application/json, not %.100q", ct)
			return nil, false
		}
	}
	body, ok := readLimited(w, r)
	if !ok {
		return nil, false
	}
	if err := DecodeStrict(body, v); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return nil, false
	}
	return body, true
}

// DecodeStrict decodes exactly one JSON value from data into v, refusing
// unknown fields, fields in another letter case than documented
// (encoding/json would match "User_Id" to user_id), a field given twice,
// and trailing data.
func DecodeStrict(data []byte, v any) error {
	if err := checkKeys(data, v); err != nil {
		return fmt.Errorf("invalid JSON body: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("invalid JSON body: %w", jsonError(err))
	}
	if dec.More() {
		return errors.New("invalid JSON body: more than one JSON value")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("invalid JSON body: trailing data after the JSON value")
	}
	return nil
}

// checkKeys checks the keys of the JSON object in data against the json
// names of the struct v points to: exact case, each at most once. Anything
// that is not an object of a struct is left to the decoder.
func checkKeys(data []byte, v any) error {
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil
	}
	allowed := map[string]bool{}
	for f := range t.Elem().Fields() {
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
			allowed[name] = true
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		key, _ := tok.(string)
		switch {
		case seen[key]:
			return fmt.Errorf("field %q given twice", key)
		case !allowed[key]:
			return fmt.Errorf("json: unknown field %q", key)
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil
		}
	}
	return nil
}

// jsonError words encoding/json's errors for a client.
func jsonError(err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return fmt.Errorf("field %q must be %s, not %s", typeErr.Field, typeErr.Type, typeErr.Value)
	}
	if errors.Is(err, io.EOF) {
		return errors.New("empty body")
	}
	return err
}

// pathID reads a positive int64 path value; it writes the 400 itself.
func pathID(w http.ResponseWriter, r *http.Request, name string) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue(name), 10, 64)
	if err != nil || id <= 0 {
		writeError(w, http.StatusBadRequest, "%s must be a positive 64-bit integer, not %.40q", name, r.PathValue(name))
		return 0, false
	}
	return id, true
}
