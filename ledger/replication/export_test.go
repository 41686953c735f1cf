package replication

// Prefixes the external tests compare with the bookie's own.
const (
	RegistryPrefixForTest = registryPrefix
	CookiePrefixForTest   = cookiePrefix
)
