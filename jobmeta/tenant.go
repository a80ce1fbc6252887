package jobmeta

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// MaxTenantBytes is the longest tenant id, in bytes: the same bound as the
// API's user ids (subscriptions.MaxUserIDLen), which are tenant ids.
const MaxTenantBytes = 200

// ErrInvalidTenant matches every error CheckTenant returns (errors.Is); a
// *TenantError says what is wrong.
var ErrInvalidTenant = errors.New("invalid tenant id")

// TenantError is why a tenant id breaks the rule of CheckTenant.
type TenantError struct {
	// Problem says what is wrong and where, for a person: "201 bytes,
	// longer than 200", "control character U+001B at byte 1", "invalid
	// UTF-8 at byte 3".
	Problem string
}

// Error is "invalid tenant id: " and the problem.
func (e *TenantError) Error() string { return ErrInvalidTenant.Error() + ": " + e.Problem }

// Is makes errors.Is(err, ErrInvalidTenant) true.
func (e *TenantError) Is(target error) bool { return target == ErrInvalidTenant }

// CheckTenant is tierq's one rule for a tenant id (the user id a job runs
// for, kept in its metadata under Tenant), as a *TenantError, or nil:
//
//   - at most MaxTenantBytes (200) bytes;
//   - valid UTF-8;
//   - no control character: C0 (U+0000 to U+001F), DEL (U+007F) or C1
//     (U+0080 to U+009F).
//
// The first problem found is reported, length first. The empty string is a
// valid tenant: it means "no tenant" (the key is left out of the metadata).
//
// The API (user_id), producer.Insert, the insert hook of producer's River
// clients (producer.TenantHook: routing.InsertOptsFor, routing.InsertMetadata,
// service.(*Service).InsertOpts) and tierctl apply it. A row inserted
// without them that breaks it is still worked and counted in fair share
// (docs/jobs.md).
func CheckTenant(tenant string) error {
	if len(tenant) > MaxTenantBytes {
		return &TenantError{Problem: fmt.Sprintf("%d bytes, longer than %d", len(tenant), MaxTenantBytes)}
	}
	for i := 0; i < len(tenant); {
		r, size := utf8.DecodeRuneInString(tenant[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			return &TenantError{Problem: fmt.Sprintf("invalid UTF-8 at byte %d", i)}
		case r < 0x20, r >= 0x7f && r <= 0x9f:
			return &TenantError{Problem: fmt.Sprintf("control character %U at byte %d", r, i)}
		}
		i += size
	}
	return nil
}

// CheckTenantIn applies CheckTenant to the tenant in a job's metadata (the
// string under Tenant), as it would be stored. Metadata that is not a JSON
// object, or has no tenant string, passes: tierq reads such a job as having
// no tenant (Read). It reads the one key with gjson, since it runs for every
// insert (producer.TenantHook), and keeps the bytes of a tenant that is not
// UTF-8 as they are (encoding/json would replace them with U+FFFD).
func CheckTenantIn(metadata []byte) error {
	if len(metadata) == 0 {
		return nil
	}
	v := gjson.GetBytes(metadata, gjson.Escape(Tenant))
	if v.Type != gjson.String {
		return nil
	}
	return CheckTenant(v.Str)
}
