//! A YAML tree that keeps line numbers, anchors, merge keys and repeated keys. (Stub.)
