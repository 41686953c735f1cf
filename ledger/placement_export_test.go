package ledger

// BookieRegistryPrefixForTest lets the external tests compare the
// registry prefix with the bookie's own.
const BookieRegistryPrefixForTest = bookieRegistryPrefix
