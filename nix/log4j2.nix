# A log4j2 configuration for a JVM server of an image: INFO and above to the console
# (the journal), each line laid out by `pattern`.
{ pkgs }:
name: pattern:
pkgs.writeText "${name}-log4j2.properties" ''
  status = error
  appender.out.type = Console
  appender.out.name = out
  appender.out.layout.type = PatternLayout
  appender.out.layout.pattern = ${pattern}
  rootLogger.level = info
  rootLogger.appenderRef.out.ref = out
''
