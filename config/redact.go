package config

import (
	"net/url"
	"strings"
)

// display is how a variable's value appears in an error: secret values
// redacted as their field's secret tag says (field.secret).
func display(f field, value string) string {
	switch f.secret {
	case "":
		return value
	case "token":
		if value == "" {
			return ""
		}
		return "[redacted]"
	case "url":
		return redactURL(value)
	default:
		return redact(value)
	}
}

// redactURL keeps a URL's scheme and host only: a webhook URL's path and
// query are its secret.
func redactURL(value string) string {
	u, err := url.Parse(value)
	if err != nil || u.Host == "" {
		if value == "" {
			return ""
		}
		return "[redacted]"
	}
	return u.Scheme + "://" + u.Host + "/[redacted]"
}

// redact hides the password of a database URL (and anything that does not
// parse as one), keeping enough to recognise which database it was. pgx
// also reads a password from the query (?password=, ?sslpassword=), so every
// query parameter whose name holds "password" is hidden too.
func redact(value string) string {
	u, err := url.Parse(value)
	if err != nil || u.Scheme == "" {
		if value == "" {
			return ""
		}
		return "[redacted]"
	}
	if u.RawQuery != "" {
		query, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			return "[redacted]"
		}
		changed := false
		for key := range query {
			if strings.Contains(strings.ToLower(key), "password") {
				query[key] = []string{"xxxxx"}
				changed = true
			}
		}
		if changed {
			u.RawQuery = query.Encode()
		}
	}
	return u.Redacted()
}
