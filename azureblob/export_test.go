package azureblob

// SetTableRollBytes sets the size past which m seals a generation of the
// lease log, so that tests see generations roll over without writing
// 256 KiB.
func SetTableRollBytes(m *TableLeaseManager, n int64) { m.rollBytes = n }
