"""mpi_test: runs an MPI program under mpirun at several rank counts.

    mpi_test(name = "comm_test", binary = ":comm_test_main")

makes sh_tests comm_test_np2, comm_test_np3 and comm_test_np4, each running
`mpirun --oversubscribe --bind-to none --mca btl self,vader -np N BINARY ARGS`
through distributed/mpi_run_test.sh (as root if need be, Open MPI's session
directory in $TEST_TMPDIR, a timeout below Bazel's), and a test_suite
`comm_test` holding them. The binary is a cc_binary whose ranks agree on the
verdict and exit nonzero on failure (distributed/mpi_test_main.h).

The tests run in Bazel's linux-sandbox: mpirun starts its ranks as children
on this machine (no ssh), Open MPI's out-of-band channel uses the loopback
interface the sandbox keeps, and vader's single-copy transfers (CMA,
process_vm_readv) need only that the ranks share a user. One thing needed a
fix: every sandbox has its own PID namespace, so concurrent tests' mpiruns
have the same PID and hence the same Open MPI job id, and vader's segments
(/dev/shm/vader_segment.<host>.<jobid>.<rank>, shared by all sandboxes)
collided: segfaults and hangs. mpi_run_test.sh moves the session directory
and the segments into $TEST_TMPDIR. Tests also run unsandboxed
(--spawn_strategy=local) and concurrently.
"""

def mpi_test(
        name,
        binary,
        ranks = [2, 3, 4],
        args = [],
        size = "medium",
        expect_failure = False,
        expect_output = "",
        timeout_s = None,
        tags = [],
        **kwargs):
    """One sh_test per rank count (<name>_np<N>) and a test_suite <name>.

    Args:
      name: the test_suite's name; the tests are <name>_np<N>.
      binary: label of the MPI program (a cc_binary, testonly is fine).
      ranks: the rank counts to run (-np).
      args: arguments passed to every rank of the program.
      size: Bazel test size; mpirun's own timeout is Bazel's less 15 s.
      expect_failure: the job must exit nonzero (and not by the timeout),
          e.g. a fault-injection test.
      expect_output: an extended regex the job's combined output must match
          (no single quotes).
      timeout_s: mpirun's timeout in seconds, when shorter than Bazel's.
      tags: tags for every test; "mpi" is added (bazel test --test_tag_filters=-mpi
          leaves them out).
      **kwargs: passed to each sh_test (e.g. target_compatible_with).
    """
    flags = []
    if expect_failure:
        flags.append("--expect_failure")
    if expect_output:
        if "'" in expect_output:
            fail("mpi_test: expect_output must not contain single quotes")
        flags.append("'--expect_output=%s'" % expect_output)
    if timeout_s:
        flags.append("--timeout_s=%d" % timeout_s)
    tests = []
    for n in ranks:
        test_name = "%s_np%d" % (name, n)
        native.sh_test(
            name = test_name,
            size = size,
            srcs = ["//distributed:mpi_run_test.sh"],
            args = flags + [str(n), "$(rootpath %s)" % binary] + args,
            data = [binary],
            tags = tags + ["mpi"],
            **kwargs
        )
        tests.append(":" + test_name)
    native.test_suite(
        name = name,
        tests = tests,
        tags = tags,
    )
