//! The engine link through `rivet-envoy-client`.
