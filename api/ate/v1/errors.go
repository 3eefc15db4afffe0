package atev1

// ErrorDomain is the google.rpc.ErrorInfo domain of every error the
// Control API returns; clients match it to know an error's Reason is
// ours (https://google.aip.dev/193).
const ErrorDomain = "ate.substrate.dev"
