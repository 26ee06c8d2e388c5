/// The version printed by `ancsd --version`.
///
/// Here rather than in main.swift: a global of main.swift is set only when main.swift's top-level
/// code runs, so code that tests call (`ancsd capture`'s header) would read it unset.
let ancsdVersion = "0.1.0"
