//! Sans-IO HTTP/1.x codec.
