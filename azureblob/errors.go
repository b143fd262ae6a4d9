package azureblob

import "fmt"

// CredentialError is returned by the LeaseManager (and so by
// SharedResource.Provision) when no way to authenticate to the storage
// account was configured: WithMasterKey, WithCredential or
// WithConnectionString.
type CredentialError struct {
	Account string
}

func (e CredentialError) Error() string {
	return fmt.Sprintf("batcher: no credential for azure storage account %q; use WithMasterKey, WithCredential or WithConnectionString", e.Account)
}

// ConfigError is returned by the LeaseManager when its configuration cannot
// address a container: an empty name, or a connection string or key the SDK
// rejects (Err).
type ConfigError struct {
	Reason string
	Err    error
}

func (e ConfigError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("batcher: azure storage configuration: %s: %v", e.Reason, e.Err)
	}
	return "batcher: azure storage configuration: " + e.Reason
}

// Unwrap returns the error the SDK reported, if any.
func (e ConfigError) Unwrap() error { return e.Err }
