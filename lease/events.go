package lease

// Names of the things Manager.Provision reports, the provisioning events of
// a shared resource. The values are those of go-batcher v1.8.0.
const (
	// VerifiedContainerEvent: the container exists; msg is its address.
	VerifiedContainerEvent = "verified-container"
	// CreatedContainerEvent: Provision created the container; msg is its
	// address.
	CreatedContainerEvent = "created-container"
	// VerifiedBlobEvent: a partition exists; val is its index.
	VerifiedBlobEvent = "verified-blob"
	// CreatedBlobEvent: Provision created a partition; val is its index.
	CreatedBlobEvent = "created-blob"
)
