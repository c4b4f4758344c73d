// A Curator LeaderLatch candidate for tenure-bench: prints "ready" once
// connected, "leading NANOS" once it leads; on SIGINT it prints "resigning
// NANOS" and closes the latch (which deletes its node, handing over) and the
// client; on SIGKILL its session expires after the session timeout.
//
// NANOS is System.nanoTime() when await() returned or just before close():
// CLOCK_MONOTONIC on Linux, one clock for every process on the machine, so
// the bench takes the hand-over as the standby's stamp less the leader's,
// without the signal's delivery or the JVM's way to its shutdown hook.
//
// Usage: java -cp ... LatchCandidate CONNECT_STRING LATCH_PATH SESSION_TIMEOUT_MS

import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.retry.RetryNTimes;

public class LatchCandidate {
    public static void main(String[] args) throws Exception {
        String connect = args[0];
        String path = args[1];
        int sessionMs = Integer.parseInt(args[2]);
        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(connect)
                .sessionTimeoutMs(sessionMs)
                .connectionTimeoutMs(sessionMs)
                .retryPolicy(new RetryNTimes(100, 50))
                .build();
        client.start();
        if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
            System.err.println("not connected");
            System.exit(2);
        }
        LeaderLatch latch = new LeaderLatch(client, path, "p" + ProcessHandle.current().pid());
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            long resigning = System.nanoTime();
            System.out.println("resigning " + resigning);
            System.out.flush();
            try {
                latch.close();
                client.close();
            } catch (Exception e) {
                // exiting anyway
            }
        }));
        System.out.println("ready");
        System.out.flush();
        latch.start();
        latch.await();
        long leading = System.nanoTime();
        System.out.println("leading " + leading);
        System.out.flush();
        Thread.sleep(Long.MAX_VALUE);
    }
}
