package image

// Cached reports whether the image of digest is unpacked in the cache, so
// that EnsurePinned of it fetches and unpacks nothing (for metrics).
func (c *Cache) Cached(digest string) bool {
	_, ok := c.cached(digest)
	return ok
}
