// Message size limits of the Dial gRPC API. The scheduler enforces them and
// Dial's own clients (the C++ client library, dialctl, dial-worker) set the
// same values on their channels, so both ends of a call agree on what fits.
// Thread-safe: constants only.
#pragma once

namespace dial {

// The largest request message the scheduler accepts (a study spec, a report,
// a worker's stderr tail): 16 MiB. A larger request fails with
// RESOURCE_EXHAUSTED before any handler runs; the connection and the server
// go on serving. Dial's clients refuse to send one in the first place (same
// code, without uploading it).
inline constexpr int kMaxRequestBytes = 16 << 20;

// The largest response message the scheduler sends and Dial's clients
// accept: 64 MiB. Room for a 1000-trial ListTrials page or a trial with a
// long metric history; a response over it fails with RESOURCE_EXHAUSTED.
inline constexpr int kMaxResponseBytes = 64 << 20;

}  // namespace dial
