// The check runs without @types/node (Debian has no package of it): the one
// Node type index.d.ts names. Users get the real one from @types/node.
interface Buffer extends Uint8Array {}
