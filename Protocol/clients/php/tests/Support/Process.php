<?php

declare(strict_types=1);

namespace Keyhole\Tests\Support;

/**
 * A child process with pipes, whose stdout is read line by line with a bound on every wait.
 */
class Process
{
    /** @var resource */
    private $proc;
    /** @var array<int, resource> */
    private array $pipes;
    private string $out = '';
    private ?int $status = null;

    /** Protocol/testing/scenario_server.py playing scenario $name on $socket (it prints "ready" once listening). */
    public static function scenarioServer(string $socket, string $name): self
    {
        return new self(['python3', Paths::protocol('testing/scenario_server.py'), $socket, $name]);
    }

    /** @param list<string> $command */
    public function __construct(array $command, ?array $env = null, ?string $cwd = null)
    {
        $spec = [0 => ['pipe', 'r'], 1 => ['pipe', 'w'], 2 => ['file', tempnam(sys_get_temp_dir(), 'kherr'), 'w']];
        $this->stderrPath = $spec[2][1];
        $proc = proc_open($command, $spec, $pipes, $cwd, $env);
        if (!is_resource($proc)) {
            throw new \RuntimeException('cannot start ' . implode(' ', $command));
        }
        $this->proc = $proc;
        $this->pipes = $pipes;
        stream_set_blocking($this->pipes[1], false);
    }

    public string $stderrPath;

    /** The next line of stdout (without its newline), waiting at most $seconds. */
    public function readLine(float $seconds = 30.0): string
    {
        $deadline = microtime(true) + $seconds;
        while (($at = strpos($this->out, "\n")) === false) {
            $left = $deadline - microtime(true);
            if ($left <= 0) {
                throw new \RuntimeException("no line from the child within $seconds s; stderr: " . $this->stderr());
            }
            $read = [$this->pipes[1]];
            $none = null;
            if (stream_select($read, $none, $none, (int)$left, (int)(($left - (int)$left) * 1e6)) > 0) {
                $chunk = fread($this->pipes[1], 65536);
                if ($chunk === '' && feof($this->pipes[1])) {
                    throw new \RuntimeException('the child ended its output; stderr: ' . $this->stderr());
                }
                $this->out .= (string)$chunk;
            }
        }
        $line = substr($this->out, 0, $at);
        $this->out = substr($this->out, $at + 1);
        return $line;
    }

    /** Whether a whole line is already there, without waiting. */
    public function hasLine(): bool
    {
        $chunk = fread($this->pipes[1], 65536);
        if (is_string($chunk)) {
            $this->out .= $chunk;
        }
        return str_contains($this->out, "\n");
    }

    public function write(string $text): void
    {
        fwrite($this->pipes[0], $text);
        fflush($this->pipes[0]);
    }

    public function closeStdin(): void
    {
        if (is_resource($this->pipes[0])) {
            fclose($this->pipes[0]);
        }
    }

    /** Waits for the exit status, at most $seconds; kills the child (and returns -1) past that. */
    public function wait(float $seconds = 10.0): int
    {
        if ($this->status !== null) {
            return $this->status;
        }
        $deadline = microtime(true) + $seconds;
        while (true) {
            $st = proc_get_status($this->proc);
            if (!$st['running']) {
                $this->status = $st['exitcode'];
                break;
            }
            if (microtime(true) > $deadline) {
                proc_terminate($this->proc, 9);
                $this->status = -1;
                break;
            }
            usleep(10000); // polling a child's exit: PHP has no blocking wait with a timeout
        }
        $this->closeStdin();
        if (is_resource($this->pipes[1])) {
            fclose($this->pipes[1]);
        }
        proc_close($this->proc);
        return $this->status;
    }

    public function kill(): void
    {
        if ($this->status === null) {
            proc_terminate($this->proc, 15);
            $this->wait(10.0);
        }
    }

    public function stderr(): string
    {
        return (string)@file_get_contents($this->stderrPath);
    }

    public function __destruct()
    {
        $this->kill();
        @unlink($this->stderrPath);
    }
}
