// LeakSanitizer defaults for the binaries that load backend plugins (the
// attnkit CLI and the backend suites); only ASan builds read them.
//
// The oneDNN plugin sets the OpenMP thread count on the backend's pool
// threads before each GEMM (backends/onednn/onednn_engine.cc); libgomp then
// keeps that thread's settings in a block it mallocs and points to only from
// its own thread-local storage, which arrives with the dlopen'ed plugin as
// dynamic TLS. Scanning that TLS at exit makes LSan's tracer fault ("Tracer
// caught signal 11"), so these binaries run with use_tls=0 (LSAN_OPTIONS,
// set by .bazelrc, still adds its own keys), which leaves libgomp's block
// looking unreachable, as is glibc's per-thread dlerror() message (a failed
// dlopen or dlsym, e.g. a plugin probing for an optional entry point): both
// are suppressed by the function that allocated them, and nothing else is.
//
// The same holds for the dynamic linker's own bookkeeping: when several
// threads dlopen plugins at once (concurrency_test), glibc 2.36 replaces a
// loaded object's search list (link_map::l_initfini, allocated in
// _dl_map_object_deps) and defers freeing the old one while other threads
// may still walk it; a list still deferred at exit, or reachable only from
// the linker's state, reads as a direct leak (56 bytes, once in a CI run).
// It is glibc's memory, never ours, so _dl_map_object_deps is suppressed
// too.
extern "C" {

// print_suppressions=0: the CLI's stderr stays its own (tests read it).
const char* __lsan_default_options() { return "use_tls=0:print_suppressions=0"; }

const char* __lsan_default_suppressions() {
  return "leak:libgomp.so\n"
         "leak:_dlerror_run\n"
         "leak:_dl_exception_create\n"
         "leak:_dl_map_object_deps\n";
}

}  // extern "C"
