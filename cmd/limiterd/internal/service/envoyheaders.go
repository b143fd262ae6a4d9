package service

import "golang.org/x/net/http/httpguts"

// validateEnvoyHeaders refuses, when the Envoy API's rate limit headers
// are on, a name that is not an HTTP header name.
func (c *Config) validateEnvoyHeaders() error {
	h := &c.Envoy.ResponseHeaders
	if !h.Enabled {
		return nil
	}
	for _, f := range []struct{ field, name string }{{"limit", h.Limit}, {"remaining", h.Remaining}, {"reset", h.Reset}} {
		if !httpguts.ValidHeaderFieldName(f.name) {
			return c.errField("envoy.response_headers."+f.field, "must be an HTTP header name, not %q", f.name)
		}
	}
	return nil
}
