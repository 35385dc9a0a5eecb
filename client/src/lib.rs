//! `lockd-native-client`: an async Rust client for lockd's REST API.
