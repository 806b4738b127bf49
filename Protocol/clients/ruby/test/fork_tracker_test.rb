# frozen_string_literal: true

require_relative "test_helper"

# Keyhole::ForkTracker counts a generation in every process that forked off: through fork (and
# Process._fork) and through Process.daemon, which does not go through _fork.
class ForkTrackerTest < Minitest::Test
  def test_fork_and_daemon_each_count_a_generation
    start = Keyhole::ForkTracker.generation
    reader, writer = IO.pipe
    pid = fork do
      reader.close
      after_fork = Keyhole::ForkTracker.generation
      # The daemon detaches (a second fork, its parent exiting); it keeps the pipe (noclose).
      Process.daemon(true, true)
      writer.write("#{after_fork - start} #{Keyhole::ForkTracker.generation - start}")
      writer.close
      exit!(0)
    end
    writer.close
    assert_equal "1 2", reader.read
    assert KeyholeTest.wait_exit(pid)&.success?
    assert_equal start, Keyhole::ForkTracker.generation, "the parent's own generation is unchanged"
  end
end
