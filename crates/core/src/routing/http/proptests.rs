//! Property tests of the path classification: the path is the client's,
//! so no path may panic the router, a bad action or queue name is the
//! structured `protocol.invalid_http_request`, and a name the client
//! percent-encodes routes to that very name.

use proptest::prelude::*;

use super::route::Route;
use crate::error::RivetError;
use crate::protocol::proptests::{config, percent_encoded, pieces, text};

/// Paths built from the pieces the classifier looks at, so most cases reach
/// a real branch, or anything at all.
fn path() -> impl Strategy<Value = String> {
    let prefix = prop_oneof![
        Just(""),
        Just("/"),
        Just("/request"),
        Just("/action/"),
        Just("/queue/"),
        Just("/health"),
        Just("/metadata"),
    ];
    let tail = prop_oneof![pieces(&["/", "?", "%", "+", "request", "action", "queue"]), text()];
    (prefix, tail).prop_map(|(prefix, tail)| format!("{prefix}{tail}"))
}

proptest! {
    #![proptest_config(config(3000))]

    #[test]
    fn any_path_classifies_or_is_a_structured_error(path in path()) {
        match Route::classify(&path) {
            Ok(Route::Raw(uri)) => prop_assert!(uri.starts_with('/')),
            Ok(_) => {}
            Err(err) => {
                prop_assert_eq!(RivetError::extract(&err).qualified_code(), "protocol.invalid_http_request");
                prop_assert!(path.starts_with("/action/") || path.starts_with("/queue/"));
            }
        }
    }
}

proptest! {
    #![proptest_config(config(1000))]

    /// `encodeURIComponent(name)` (either hex case), with or without a query.
    #[test]
    fn encoded_names_route_to_themselves(
        name in ".{1,12}",
        lower in any::<bool>(),
        query in proptest::option::of("[a-z=&%/?]{0,8}"),
    ) {
        let mut segment = percent_encoded(&name, lower);
        if let Some(query) = &query {
            segment = format!("{segment}?{query}");
        }
        prop_assert_eq!(Route::classify(&format!("/action/{segment}")).unwrap(), Route::Action(name.clone()));
        prop_assert_eq!(Route::classify(&format!("/queue/{segment}")).unwrap(), Route::Queue(name));
    }

    /// Everything after `/request` goes to `onRequest` untouched.
    #[test]
    fn raw_paths_pass_through(rest in "(/|\\?)\\PC{0,16}") {
        let expected = if rest.starts_with('?') { format!("/{rest}") } else { rest.clone() };
        prop_assert_eq!(Route::classify(&format!("/request{rest}")).unwrap(), Route::Raw(expected));
    }
}
